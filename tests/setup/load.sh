#!/usr/bin/env bash
# CPU load for a whole test run, to find the tests that pass only on a quiet machine (a race that a
# busy CI runner loses, a wait that is long enough only when nothing else runs): one busy loop per
# core, each a plain `bash` loop at nice 0 (it competes with the tests as an equal, whatever the
# caller's niceness; only root can lower a positive one), detached from the caller's session and
# stdio. Every loop ends by itself after SKIFF_LOAD_MAX_SECONDS, so a `stop` that never comes (a
# killed CI job, a lost pid file) leaves no load behind for long. No network, nothing installed.
#
# usage: load.sh start               start the loops; while they run, a second start does nothing
#        load.sh stop                stop the loops `start` recorded (only those: pid + start time)
#        load.sh status              print the running loops' pids; exit 1 when none runs
#        load.sh run -- CMD [ARG...] start the loops, then run CMD in this process (exec: its
#                                    exit status, signals and terminal are CMD's own); a watcher
#                                    stops the loops within 0.1 s of CMD's end, however it ends
#                                    (loops an earlier `start` had running are left running)
#   e.g. the whole CI run under load:  bash tests/setup/load.sh run -- env CI=true bash .ci/run
# env:   SKIFF_LOAD_MAX_SECONDS  a loop's longest life (default 6000: 100 minutes)
#        SKIFF_LOAD_JOBS         how many loops (default: nproc)
#        SKIFF_LOAD_PIDFILE      where `start` records them ("<pid> <start time>" lines; default
#                                ${TMPDIR:-/tmp}/skiff-load-<uid>.pids, with a .lock beside it)
# Messages go to stderr, so CMD's stdout stays its own.
set -euo pipefail

readonly TAG=skiff-load # the loops' $0: `ps` shows them as "bash -c ... skiff-load <seconds>"
# A loop: prints its pid and lets go of stdout, then is as busy as bash gets until its time is up.
# shellcheck disable=SC2016 # expanded by the loop's own bash
readonly LOOP='echo $$; exec >/dev/null; end=$((SECONDS + $1)); while ((SECONDS < end)); do :; done'

max=${SKIFF_LOAD_MAX_SECONDS:-6000}
jobs=${SKIFF_LOAD_JOBS:-$(nproc)}
pidfile=${SKIFF_LOAD_PIDFILE:-${TMPDIR:-/tmp}/skiff-load-$(id -u).pids}

started=0 # loops the last start() started (not counting those it found running)
say() { echo "load: $*" >&2; }
usage() {
  say "usage: load.sh start | stop | status | run -- CMD [ARG...]"
  exit 2
}
[[ $max =~ ^[1-9][0-9]*$ ]] || { say "SKIFF_LOAD_MAX_SECONDS: not a number of seconds: '$max'"; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { say "SKIFF_LOAD_JOBS: not a positive count: '$jobs'"; exit 2; }

# "<pid> <start time>" of a live (not zombie) process; fails when it is gone. The start time (clock
# ticks since boot, /proc/<pid>/stat field 22) tells a loop from a later process given its pid.
ident() {
  local stat rest f
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  rest=${stat##*) } # fields 3.. (the command name in parentheses may hold spaces)
  read -ra f <<<"$rest"
  [ "${f[0]}" != Z ] || return 1
  echo "$1 ${f[19]}"
}

# The niceness of a live process (/proc/<pid>/stat field 19).
niceness() {
  local stat rest f
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  rest=${stat##*) }
  read -ra f <<<"$rest"
  echo "${f[16]}"
}

# The pid file's lines that are still one of our loops: same pid, same start time, our argv.
live() {
  [ -f "$pidfile" ] || return 0
  local pid start argv
  while read -r pid start; do
    [[ $pid =~ ^[0-9]+$ ]] || continue
    [ "$(ident "$pid" || true)" = "$pid $start" ] || continue
    argv=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null || true)
    [[ $argv == *" $TAG "* ]] || continue
    echo "$pid $start"
  done <"$pidfile"
}

# Serializes start and stop (fd 9, which neither a loop nor CMD inherits).
lock() {
  exec 9>>"$pidfile.lock"
  flock 9
}
unlock() { exec 9>&-; }

pids_of() { cut -d' ' -f1 <<<"$1" | paste -sd' '; }

start() {
  lock
  local running have i pid id cur lines=() spawned=() at="nice 0"
  running=$(live)
  have=0
  [ -z "$running" ] || have=$(wc -l <<<"$running")
  if ((have >= jobs)); then
    say "already running: $have busy loops (pids $(pids_of "$running")), in $pidfile"
    started=0
    unlock
    return 0
  fi
  [ -z "$running" ] || mapfile -t lines <<<"$running"
  # Exactly nice 0: `nice -n` adds to the caller's niceness (a negative one is raised to 0; a
  # positive one only root can lower, and nice then warns and runs the loop as it is).
  cur=$(nice)
  for ((i = have; i < jobs; i++)); do
    # setsid -f: in a session of its own, and no child of this script (after run's exec, CMD
    # would inherit children it never started, and a `wait` of its own would wait for them).
    # The loop tells its pid.
    pid=$(setsid -f nice -n "$((-cur))" bash -c "$LOOP" "$TAG" "$max" </dev/null 2>/dev/null 9>&-)
    [[ $pid =~ ^[0-9]+$ ]] || { say "a busy loop did not start"; exit 1; }
    id=$(ident "$pid") || { say "busy loop $pid ended at once"; exit 1; }
    lines+=("$id")
    spawned+=("$pid")
  done
  printf '%s\n' "${lines[@]}" >"$pidfile.tmp"
  mv -f "$pidfile.tmp" "$pidfile"
  started=${#spawned[@]}
  unlock
  for pid in "${spawned[@]}"; do
    cur=$(niceness "$pid" || echo 0)
    [ "$cur" = 0 ] && continue
    say "warning: loop $pid runs at nice $cur, not 0 (lowering it needs root)"
    at="nice $cur"
  done
  say "started ${#spawned[@]} busy loops at $at (pids ${spawned[*]}; $have already ran)," \
    "each ending by itself after ${max}s; recorded in $pidfile"
}

stop() {
  lock
  local running pids all i
  running=$(live)
  if [ -z "$running" ]; then
    rm -f "$pidfile"
    unlock
    say "no busy loop running"
    return 0
  fi
  all=$(pids_of "$running")
  read -ra pids <<<"$all"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    [ -n "$(live)" ] || break
    sleep 0.1
  done
  running=$(live)
  if [ -n "$running" ]; then
    read -ra pids <<<"$(pids_of "$running")"
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  unlock
  say "stopped the busy loops (pids $all)"
}

status() {
  local running
  running=$(live)
  if [ -z "$running" ]; then
    say "no busy loop running"
    return 1
  fi
  pids_of "$running"
}

run() {
  [ "${1:-}" != -- ] || shift
  [ $# -gt 0 ] || usage
  start
  # CMD becomes this very process (exec): it has its signals, stdin, terminal and process group
  # as if run directly, and its exit status is this script's. A watcher in a session of its own
  # stops the loops once this pid (with this start time) has ended, however it ends.
  # Loops that an earlier `start` had running all along are that start's to stop.
  if ((started > 0)); then
    local pid since
    read -r pid since <<<"$(ident $$)"
    setsid -f bash "$(realpath "${BASH_SOURCE[0]}")" _watch "$pid" "$since" \
      </dev/null >/dev/null 9>&-
  fi
  exec "$@"
}

# Internal (run's watcher): waits until process $1 with start time $2 has ended, then stops.
watch() {
  while [ "$(ident "$1" || true)" = "$1 $2" ]; do sleep 0.1; done
  stop
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
run)
  shift
  run "$@"
  ;;
_watch) watch "$2" "$3" ;;
*) usage ;;
esac
