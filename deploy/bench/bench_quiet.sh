# Timing real runs beside other work on a shared machine (sourced by the
# bench scripts that compare real runs with `troupe sim`): how many cores other
# programs keep busy, waiting for them to quieten, and one run timed with that.
# Settings: BENCH_QUIET (cores of other work a run may share, default 0.3),
# BENCH_TRIES (default 3), BENCH_WAIT (seconds to wait for quiet, default 300).
# One timed run: its summary, and how many cores other programs kept busy
# meanwhile (all CPU time in /proc/stat over the run, less this run's
# own). A run starts once other programs keep under BENCH_QUIET cores busy
# (or after BENCH_WAIT seconds), and one that shared the cores with more than
# that is retried (up to BENCH_TRIES times, the least disturbed kept): this
# machine's other work slows the real run and nothing in the simulation.
quiet=${BENCH_QUIET:-0.3}
tries=${BENCH_TRIES:-3}
wait_s=${BENCH_WAIT:-300}
others_now() {  # cores other programs keep busy over one second (this script idles meanwhile)
  local b0 b1
  b0=$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat)
  sleep 1
  b1=$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat)
  echo "$(( (b1 - b0) * 100 / $(getconf CLK_TCK) ))"
}
wait_quiet() {  # before taking the lock: while others keep more than `quiet` cores busy, up to wait_s
  local waited=0
  while (( $(others_now) > $(awk -v q="$quiet" 'BEGIN { print int(q * 100) }') && waited < wait_s )); do
    ((waited += 1))
  done
}
timed_run() {  # OUT_JSON ARGS...
  local out=$1 hz busy0 busy1 t0 t1
  shift
  hz=$(getconf CLK_TCK)
  busy0=$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat)
  t0=$(date +%s.%N)
  /usr/bin/time -f '%U %S' -o "$out.cpu" "$@" --summary-json "$out" > "$out.log"
  t1=$(date +%s.%N)
  busy1=$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat)
  read -r user sys < "$out.cpu"
  awk -v b="$((busy1 - busy0))" -v hz="$hz" -v u="$user" -v s="$sys" -v w="$(echo "$t1 - $t0" | bc)" \
    'BEGIN { o = (b / hz - u - s) / w; printf "%.2f\n", o < 0 ? 0 : o }' > "$out.others"
}
export -f timed_run
# OUT ARGS...: the least disturbed of up to `tries` timed runs of ARGS, each
# after wait_quiet and under flock $lock, as OUT (its summary) and OUT.others.
least_disturbed_run() {
  local dest=$1 best="" k out
  shift
  for ((k = 0; k < tries; ++k)); do
    out="$dest.try$k"
    wait_quiet
    flock "$lock" bash -c 'timed_run "$@"' _ "$out" "$@"
    if [[ -z $best ]] || awk -v a="$(cat "$out.others")" -v b="$(cat "$best.others")" 'BEGIN { exit !(a < b) }'; then
      best=$out
    fi
    awk -v a="$(cat "$best.others")" -v q="$quiet" 'BEGIN { exit !(a <= q) }' && break
  done
  cp "$best" "$dest"
  cp "$best.others" "$dest.others"
}
