#!/usr/bin/env bash
# Open MPI's "remote shell" for the two-node tests (two_node_test.cc): mpirun --host nodeA:2,nodeB:2
# --mca plm_rsh_agent node_agent.sh starts each node's daemon as `node_agent.sh HOST orted ...`,
# the daemon's command line given as a remote shell would receive it. Instead of a remote machine,
# the daemon (and the ranks it starts) runs here in new UTS and mount namespaces:
#   - its hostname is HOST, so MPI and wmap see two nodes;
#   - with $WMAP_TEST_NODES/nodes/HOST present, that folder is bind-mounted on $WMAP_TEST_NODES/view,
#     so every node sees its own copy of the files at one path (its own page-cache entries too);
#   - with $WMAP_TEST_NODES/nodes/HOST.env present, it is sourced first (environment for one node).
# The mounts live in the daemon's private mount namespace and vanish with it: nothing to clean up.
set -euo pipefail
host=$1
shift
root=${WMAP_TEST_NODES:?node_agent.sh: WMAP_TEST_NODES is not set}
exec unshare --uts --mount --propagation private /bin/bash -c '
  set -e
  hostname "$1"
  if [[ -d "$2/nodes/$1" ]]; then mount --bind "$2/nodes/$1" "$2/view"; fi
  if [[ -f "$2/nodes/$1.env" ]]; then set -a; source "$2/nodes/$1.env"; set +a; fi
  set +e
  eval "$3"' node_agent "$host" "$root" "$*"
