// SPDX-License-Identifier: MIT
// Every options struct of streamq, for code that wants them all: the shared vocabulary
// (streamq/common.hpp) and the options of each class, which live beside it.
#pragma once

#include "streamq/common.hpp"
#include "streamq/consumer_options.hpp"
#include "streamq/inspector.hpp"
#include "streamq/producer.hpp"
#include "streamq/scheduler.hpp"
#include "streamq/stats.hpp"
