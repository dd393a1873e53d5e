#!/usr/bin/env bash
# Simulated hosts for multi-host tests: H network namespaces on this machine, each a "host" with its own address
# (10.213.0.1..H on eth0, a veth pair to a bridge in a switch namespace) and its own host name (a UTS namespace
# per command: simhost0..simhostH-1). OpenMPI reaches the other hosts over TCP through an rsh agent of ours that
# enters the host's namespace (and leaves mpirun's session, as sshd would) instead of ssh. The machine's own
# network is not touched: the veths and the bridge live in the test's namespaces only.
#
# usage: simhosts.sh H3 HOSTS SLOTS SCENARIO [ARGS...]
#   SCENARIO: parity MODE [h3 parity args]  h3 parity --ranks HOSTS*SLOTS with the ranks spread over the hosts
#             generate-encoder-host         the encoder on host 0, denoise ranks on the others; latents == 1 rank
#             killed-host                   host 1's processes killed mid-job; fails within --timeout, naming them
#             cut-link                      host 1's link set down mid-job; same expectations
#             serve-lost-host               h3 serve over the hosts; a job fails when host 1 is cut; group back
# Needs root, `ip netns`, `unshare --uts` and mpirun; skips LOUDLY (exit 77) where they are missing. Everything
# it creates (namespaces, /etc/netns/<ns>, its temp folder, processes in its namespaces) is removed on exit,
# failure included.
set -u
# Not root but allowed to sudo without a password (a CI runner's usual set-up): the same script under sudo.
if [ "$(id -u)" != 0 ] && [ -z "${H3_SIMHOSTS_SUDO:-}" ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  exec sudo -n -E H3_SIMHOSTS_SUDO=1 PATH="$PATH" bash "$0" "$@"
fi
H3=$1 HOSTS=$2 SLOTS=$3 SCENARIO=$4
shift 4
NP=$((HOSTS * SLOTS))
HERE=$(cd "$(dirname "$0")" && pwd)
P="h3s$$"  # namespace prefix, unique per run (parallel CTest runs do not meet)
SW="${P}sw"
NETS=()
DIR=""

skip() { echo "SKIPPED LOUDLY: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*"; }

ns_of() { echo "${P}h$1"; }
host_of() { echo "simhost$1"; }

# Kills every process inside namespace $1 (repeated: a dying orted may still fork).
kill_ns() {
  local i pids
  for i in 1 2 3 4 5; do
    pids=$(ip netns pids "$1" 2>/dev/null)
    [ -z "$pids" ] && return 0
    kill -9 $pids 2>/dev/null
    sleep 0.2
  done
}

cleanup() {
  local rc=$?
  set +e
  local n
  for n in "${NETS[@]}" "$SW"; do
    if ip netns list | grep -qw "$n"; then
      kill_ns "$n"
      ip netns del "$n" 2>/dev/null
    fi
    rm -rf "/etc/netns/$n"
  done
  [ -n "$DIR" ] && rm -rf "$DIR"
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- can this machine make hosts? ---
[ "$(id -u)" = 0 ] || skip "simulated hosts need root (ip netns, unshare); running as $(id -un)"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
command -v unshare >/dev/null || skip "no 'unshare' (util-linux)"
command -v mpirun >/dev/null || skip "no mpirun (OpenMPI)"
ip netns add "${P}probe" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed: no CAP_SYS_ADMIN?)"
ip netns del "${P}probe"
unshare --uts true 2>/dev/null || skip "cannot create a UTS namespace (unshare --uts failed)"

# Namespaces of an earlier run that was killed outright (SIGKILL: no trap ran) are removed here.
for n in $(ip netns list | awk '{print $1}' | grep -E '^h3s[0-9]+(sw|h[0-9]+)$'); do
  owner=${n#h3s}
  owner=${owner%%[!0-9]*}
  if [ ! -d "/proc/$owner" ]; then
    echo "removing $n, left by run $owner"
    kill_ns "$n"
    ip netns del "$n" 2>/dev/null
    rm -rf "/etc/netns/$n"
  fi
done

# --- the hosts ---
DIR=$(mktemp -d /tmp/h3-simhosts.XXXXXX)
ip netns add "$SW" || fail "ip netns add $SW"
ip -n "$SW" link add br0 type bridge || fail "bridge in $SW"
ip -n "$SW" link set br0 up
: >"$DIR/hostfile"
hosts_lines="127.0.0.1 localhost"
for ((i = 0; i < HOSTS; i++)); do
  hosts_lines+=$'\n'"10.213.0.$((i + 1)) $(host_of $i)"
done
for ((i = 0; i < HOSTS; i++)); do
  n=$(ns_of $i)
  NETS+=("$n")
  ip netns add "$n" || fail "ip netns add $n"
  ip -n "$SW" link add "v$i" type veth peer name eth0 netns "$n" || fail "veth for $n"
  ip -n "$SW" link set "v$i" master br0 up
  ip -n "$n" link set lo up
  ip -n "$n" addr add "10.213.0.$((i + 1))/24" dev eth0
  ip -n "$n" link set eth0 up
  # `ip netns exec` shows /etc/netns/<ns>/hosts as /etc/hosts: every host name resolves on every host.
  mkdir -p "/etc/netns/$n"
  echo "$hosts_lines" >"/etc/netns/$n/hosts"
  echo "$(host_of $i) slots=$SLOTS" >>"$DIR/hostfile"
done

# The rsh agent: `agent [-x] HOST COMMAND...` as OpenMPI calls ssh. It enters HOST's namespace with a clean
# environment (what a login on another machine would have) and a session of its own.
cat >"$DIR/agent" <<'EOF'
#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
host=$1
shift
exec setsid env -i PATH="@PATH@" HOME=/root ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} \
  ip netns exec "@P@h${host#simhost}" unshare --uts sh -c 'hostname "$0"; exec sh -c "$*"' "$host" "$@"
EOF
sed -i "s|@PATH@|$PATH|; s|@P@|$P|" "$DIR/agent"
chmod +x "$DIR/agent"

# OpenMPI over the hosts' network only; mpirun finds the hostfile and the agent in its environment, so
# `h3 --ranks N` (which starts mpirun itself) spans the hosts unchanged.
export OMPI_MCA_orte_default_hostfile="$DIR/hostfile"
export OMPI_MCA_plm_rsh_agent="$DIR/agent"
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=10.213.0.0/24
export OMPI_MCA_oob_tcp_if_include=10.213.0.0/24
unset H3_RANKS

# Runs a command on host $1 (its namespace, its host name).
on_host() {
  local i=$1
  shift
  ip netns exec "$(ns_of "$i")" unshare --uts sh -c 'hostname "$0"; exec "$@"' "$(host_of "$i")" "$@"
}

# Fails unless no process is left in host $1's namespace within $2 seconds.
expect_empty_host() {
  local i=$1 limit=$2 t=0
  while [ -n "$(ip netns pids "$(ns_of "$i")")" ]; do
    if [ "$t" -ge "$((limit * 5))" ]; then
      ps -o pid,ppid,etimes,args -p "$(ip netns pids "$(ns_of "$i")" | tr '\n' ',' | sed 's/,$//')"
      fail "processes left on $(host_of "$i") ${limit}s after the command returned"
    fi
    sleep 0.2
    t=$((t + 1))
  done
  log "no process left on $(host_of "$i")"
}

log "$HOSTS hosts x $SLOTS slots ($NP ranks), scenario $SCENARIO"
source "$HERE/scenarios.sh"
run_scenario "$@"
