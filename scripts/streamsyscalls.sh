#!/bin/bash
# streamsyscalls.sh LLBD OUTDIR [COUNTS] — what one SSE event costs llbd and
# HAProxy in system calls and CPU (docs/performance.md, "What an event costs,
# counted"). Runs `llbsim streambench --paths haproxy,llbd` with long streams
# and, 4 s into each run's steady state, counts for 8 s the system calls of
# the proxy (perf stat on the syscall tracepoints) and, at the same time, the
# writes of the backend: one per event it sent. Then, for llbd, a `perf
# record` of 6 s and its heap profile (over --debug-listen). Needs root (or
# perf_event_paranoid ≤ 1), perf, haproxy and bin/llbsim.
#
# Per path and count OUTDIR gets perf-<path>-<n>.txt (the proxy),
# perf-backend-<path>-<n>.txt (the events), pids (CPU ticks over the 8 s,
# RSS), perf-record-<n>.data and heap-<n>.pprof; report.md is the benchmark.
set -u
LLBD=$1
OUT=$2
COUNTS=${3:-1000,4000}
LLBSIM=${LLBSIM:-bin/llbsim}
mkdir -p "$OUT"
rm -rf "$OUT/sb" && mkdir -p "$OUT/sb"
"$LLBSIM" streambench --llbd "$LLBD" --dir "$OUT/sb" --counts "$COUNTS" --rounds 1 --paths haproxy,llbd \
	--events 1500 --ramp 5s --window 30s --idle-check -1s --base-port 18500 \
	--llbd-arg=--debug-listen=127.0.0.1:18599 >"$OUT/report.md" 2>"$OUT/progress.log" &
BENCH=$!
conns() { ss -Htn state established "( sport = :$1 )" | wc -l; }
SC=raw_syscalls:sys_enter
for s in read write writev recvfrom sendto epoll_wait epoll_pwait epoll_ctl futex nanosleep setsockopt ioctl madvise sched_yield clock_gettime; do
	SC=$SC,syscalls:sys_enter_$s
done
for n in ${COUNTS//,/ }; do
	for p in haproxy llbd; do
		port=18501
		[ $p = llbd ] && port=18502
		until [ "$(conns $port)" -ge $((n * 9 / 10)) ]; do
			sleep 1
			kill -0 $BENCH 2>/dev/null || exit 1
		done
		sleep 4
		pid= backend=
		for c in $(pgrep -P $BENCH); do
			case $(readlink /proc/$c/exe) in
			*llbsim) backend=$c ;;
			*haproxy) [ $p = haproxy ] && pid=$c ;;
			*) [ $p = llbd ] && pid=$c ;;
			esac
		done
		t0=$(awk '{print $14+$15}' /proc/$pid/stat)
		perf stat -e "$SC" -p "$pid" -o "$OUT/perf-$p-$n.txt" -- sleep 8 &
		p1=$!
		perf stat -e syscalls:sys_enter_write,syscalls:sys_enter_writev -p "$backend" -o "$OUT/perf-backend-$p-$n.txt" -- sleep 8 &
		p2=$!
		wait $p1 $p2
		t1=$(awk '{print $14+$15}' /proc/$pid/stat)
		echo "$n $p cpu ticks over 8 s: $((t1 - t0))" >>"$OUT/pids"
		if [ $p = llbd ]; then
			perf record -F 499 -g -p "$pid" -o "$OUT/perf-record-$n.data" -- sleep 6 >/dev/null 2>&1
			curl -s -o "$OUT/heap-$n.pprof" "http://127.0.0.1:18599/debug/pprof/heap"
			echo "$n $p $(grep VmRSS /proc/$pid/status)" >>"$OUT/pids"
		fi
		until [ "$(conns $port)" -le $((n / 10)) ]; do
			sleep 1
			kill -0 $BENCH 2>/dev/null || break
		done
	done
done
wait $BENCH
