#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# What a tracked task's success costs the server, against the floor of its writes: 38,400
# tracked tasks (their records written as an enqueue writes them) read into a group, then their
# successes written 128 a call, once as done.lua calls (the scripts of src/lua, includes
# expanded as the build does) and once as the same commands pipelined with no Lua at all;
# each twice, interleaved. Prints the server's CPU per task (/proc/<pid>/stat around each).
# Usage: bench/tracked_floor.sh (a private server), or tracked_floor.py <port> <server pid>.
import os
import re
import sys
import time

import redis

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src', 'lua')
N, CALL = 38400, 128


def expand(name):
    out = []
    with open(os.path.join(SRC, name)) as f:
        for line in f:
            m = re.match(r'-- @include (\S+)', line)
            if m:
                with open(os.path.join(SRC, m.group(1))) as lib:
                    out.append(lib.read())
            else:
                out.append(line)
    return ''.join(out)


def main():
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    r = redis.Redis(port=port)
    done = r.register_script(expand('done.lua'))

    def cpu():
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf('SC_CLK_TCK')

    def setup():
        for key in r.scan_iter('q*'):
            r.delete(key)
        p = r.pipeline(transaction=False)
        for i in range(N):
            tid = 't%06d' % i
            p.xadd('q', {'task_id': tid, 'task_type': 'send_email', 'payload': '{"to":"user@example.com"}',
                         'created_at': '2026-11-29T18:00:00.123456', 'max_retries': '3', 'retry_count': '0',
                         'retention': '60000 -1'})
            p.hset('q:task:' + tid, mapping={'state': 'queued', 'type': 'send_email', 'enqueued_at': '1',
                                             'done_ms': '60000', 'dead_ms': '-1', 'attempts': '0'})
            if i % 1000 == 999:
                p.execute()
        p.execute()
        r.xgroup_create('q', 'g', '0')
        read = r.xreadgroup('g', 'me', {'q': '>'}, count=N)
        return [(e[0].decode(), e[1][b'task_id'].decode()) for e in read[0][1]]

    def by_script(entries):
        for k in range(0, len(entries), CALL):
            chunk = entries[k:k + CALL]
            args = ['g', 'q', 'me', str(len(chunk))]
            for entry, tid in chunk:
                args += [entry, 'done', '1', '1', '42', '', '', '6', 'task_id', tid, 'task_type', 'send_email',
                         'retention', '60000 -1']
            done(keys=['q', 'q:dlq'], args=args)

    def pipelined(entries):
        now = str(int(time.time() * 1000))
        for k in range(0, len(entries), CALL):
            chunk = entries[k:k + CALL]
            p = r.pipeline(transaction=False)
            for entry, tid in chunk:
                key = 'q:task:' + tid
                p.xack('q', 'g', entry)
                p.hmget(key, 'state', 'attempts', 'waited')
                p.execute_command('HSET', key, 'state', 'done', 'finished_at', now, 'started_at', now, 'worker',
                                  'me', 'attempts', '1', 'result', '42')
                p.execute_command('XADD', 'q:events', 'MAXLEN', '~', '10000', '*', 'event', 'started', 'task_id',
                                  tid, 'at', now, 'attempt', '1', 'worker', 'me')
                p.execute_command('XADD', 'q:events', 'MAXLEN', '~', '10000', '*', 'event', 'done', 'task_id',
                                  tid, 'at', now)
                p.execute_command('PEXPIRE', key, '60000')
            p.execute_command('XDEL', 'q', *[e for e, _ in chunk])
            p.execute()

    for name, write in [('done.lua', by_script), ('pipelined, no Lua', pipelined)] * 2:
        entries = setup()
        before = cpu()
        write(entries)
        print(f'{name}: {(cpu() - before) * 1e6 / len(entries):.2f} µs of server CPU a tracked success')


if __name__ == '__main__':
    main()
