// SPDX-License-Identifier: MIT
// Umbrella header: everything a program needs to enqueue, run and watch tasks.
#pragma once

#include "streamq/consumer.hpp"
#include "streamq/errors.hpp"
#include "streamq/inspector.hpp"
#include "streamq/log.hpp"
#include "streamq/options.hpp"
#include "streamq/producer.hpp"
#include "streamq/record.hpp"
#include "streamq/scheduler.hpp"
#include "streamq/schedules.hpp"
#include "streamq/stats.hpp"
#include "streamq/task.hpp"
#include "streamq/version.hpp"
