# The scenarios of simhosts.sh (sourced by it: the hosts exist, on_host / expect_empty_host / fail / log are
# defined, DIR is the run's temp folder, H3 the binary, NP = HOSTS x SLOTS ranks).

# A small generate request: procedural mini models, a few seconds per run on CI's CPUs.
GEN_ARGS=(--prompt "a kite over the sea" --width 128 --height 64 --seed 11)

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# Waits until file $1 has a line matching $2 (at most $3 s) while process $4 lives.
wait_for_line() {
  local t=0
  until grep -Eq "$2" "$1"; do
    kill -0 "$4" 2>/dev/null || { cat "$1"; fail "the job ended before /$2/ appeared"; }
    [ "$t" -ge "$(($3 * 10))" ] && { cat "$1"; fail "no line /$2/ within $3 s"; }
    sleep 0.1
    t=$((t + 1))
  done
}

scenario_parity() {
  local mode=$1
  shift
  local t0
  t0=$(now)
  on_host 0 "$H3" --log-level info parity "$@" --mode "$mode" --ranks "$NP" >"$DIR/out" 2>&1
  local status=$?
  cat "$DIR/out"
  [ "$status" -eq 0 ] || fail "h3 parity --mode $mode on $NP ranks over $HOSTS hosts: status $status"
  case "$mode" in  # the sequence-parallel modes are bitwise equal to one rank
    ulysses | ulysses-ag) grep -q "is bitwise identical to the 1-rank run" "$DIR/out" || fail "not bitwise equal" ;;
  esac
  # Every host took part, under its own name.
  for ((i = 0; i < HOSTS; i++)); do
    grep -q "host $(host_of $i):" "$DIR/out" || fail "the placement printout does not list $(host_of $i)"
  done
  log "PASS: parity $mode, $NP ranks over $HOSTS hosts in $(secs "$t0" "$(now)") s"
}

scenario_generate_encoder_host() {
  local t0 t1
  t0=$(now)
  on_host 0 "$H3" --log-level warn generate "${GEN_ARGS[@]}" --steps 3 --latents -o "$DIR/one.mp4" >"$DIR/one" 2>&1 ||
    { cat "$DIR/one"; fail "the 1-rank reference run failed"; }
  t1=$(now)
  # The first host's ranks encode (SLOTS of them, tensor-parallel); the other hosts denoise.
  on_host 0 "$H3" --log-level info --ranks "$NP" generate "${GEN_ARGS[@]}" --steps 3 --latents -o "$DIR/many.mp4" \
    --encoder-ranks "$SLOTS" --encoder-at first >"$DIR/out" 2>&1
  local status=$?
  cat "$DIR/out"
  [ "$status" -eq 0 ] || fail "h3 generate over $HOSTS hosts: status $status"
  grep -Eq "encoder: .*$(host_of 0)" "$DIR/out" || fail "the printout does not place the encoder on $(host_of 0)"
  for ((i = 1; i < HOSTS; i++)); do
    grep -Eq "denoise: .*$(host_of $i)" "$DIR/out" || fail "the printout does not place denoise ranks on $(host_of $i)"
  done
  cmp "$DIR/one.latents.safetensors" "$DIR/many.latents.safetensors" ||
    fail "latents over $HOSTS hosts (encoder on $(host_of 0)) differ from the 1-rank run"
  log "PASS: generate, encoder on $(host_of 0), latents byte-identical to 1 rank" \
    "(1 rank $(secs "$t0" "$t1") s, $NP ranks $(secs "$t1" "$(now)") s)"
}

# A generate job long enough to be hit mid-denoise; host 1 is lost by `$1` (kill or cut); the job must fail within
# the timeout, name host 1's ranks and host, return soon after, and leave nothing on the hosts still reachable.
lose_host_mid_job() {
  local how=$1 timeout=10
  local t0 t_fault t_end
  t0=$(now)
  on_host 0 "$H3" --log-level warn --timeout "$timeout" --ranks "$NP" generate "${GEN_ARGS[@]}" --steps 200 \
    -o "$DIR/lost.mp4" >"$DIR/out" 2>&1 &
  local job=$!
  wait_for_line "$DIR/out" "progress: denoise [1-9]" 180 "$job"
  t_fault=$(now)
  if [ "$how" = kill ]; then
    log "killing every process on $(host_of 1)"
    kill -9 $(ip netns pids "$(ns_of 1)")
  else
    log "cutting $(host_of 1)'s link (ip link set eth0 down)"
    ip -n "$(ns_of 1)" link set eth0 down
  fi
  # The job's own bound: timeout + 3 s abort grace + 10 s teardown grace + 2 s; 60 s means it hung.
  local t=0
  while kill -0 "$job" 2>/dev/null && [ "$t" -lt 600 ]; do
    sleep 0.1
    t=$((t + 1))
  done
  if kill -0 "$job" 2>/dev/null; then
    cat "$DIR/out"
    fail "h3 still running 60 s after $(host_of 1) was lost (--timeout $timeout)"
  fi
  wait "$job"
  local status=$?
  t_end=$(now)
  cat "$DIR/out"
  local took
  took=$(secs "$t_fault" "$t_end")
  [ "$status" -ne 0 ] || fail "the job succeeded without $(host_of 1)"
  awk -v t="$took" -v l="$((timeout + 20))" 'BEGIN { exit !(t <= l) }' ||
    fail "h3 returned ${took} s after the loss (limit $((timeout + 20)) s = --timeout + teardown)"
  local lost="rank ($(seq -s '|' "$SLOTS" $((2 * SLOTS - 1)))) \\($(host_of 1)\\)"
  grep -Eq "$lost" "$DIR/out" || fail "no line names host 1's ranks and host (/$lost/)"
  for ((i = 0; i < HOSTS; i++)); do
    [ "$i" -eq 1 ] || expect_empty_host "$i" 5
  done
  log "PASS: host lost by $how: status $status, returned $took s after the loss (--timeout $timeout)," \
    "job ran $(secs "$t0" "$t_fault") s before"
}

scenario_killed_host() { lose_host_mid_job kill; }
scenario_cut_link() { lose_host_mid_job cut; }


scenario_serve_lost_host() {
  local py
  py=$(command -v python3) || skip "no python3 for the serve client"
  SIM_NP=$NP SIM_LOST_NS=$(ns_of 1) SIM_LOST_HOST=$(host_of 1) on_host 0 "$py" "$HERE/serve_lost_host.py" "$H3" ||
    fail "h3 serve over $HOSTS hosts"
  for ((i = 0; i < HOSTS; i++)); do
    expect_empty_host "$i" 10
  done
}

run_scenario() {
  case "$SCENARIO" in
    parity) scenario_parity "$@" ;;
    generate-encoder-host) scenario_generate_encoder_host "$@" ;;
    killed-host) scenario_killed_host "$@" ;;
    cut-link) scenario_cut_link "$@" ;;
    serve-lost-host) scenario_serve_lost_host "$@" ;;
    *) fail "unknown scenario '$SCENARIO'" ;;
  esac
}
