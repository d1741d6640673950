// expect: QueueStats::length counts every level now
// A program that reads the deprecated total_length is told what to use instead (the test runs
// with -Werror=deprecated-declarations, so the warning is a failure here).
#include <streamq/streamq.hpp>

std::int64_t backlog(const streamq::QueueStats& st) { return st.total_length; }
