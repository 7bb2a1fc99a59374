#!/usr/bin/env bash
# Runs containerd's integration/client test binary offline: inside a new network namespace
# (only loopback) and mount namespace, where /etc/hosts maps the suite's image registries
# (ghcr.io, registry.k8s.io, ...) to 127.0.0.1 and a private docker-registry serves the
# locally built images there over TLS (a throwaway CA, named by SSL_CERT_FILE). The suite's
# image names are fixed at its package init (before flags are parsed, so -image-list cannot
# change them): this is how they resolve without leaving the machine.
#
# usage: unshare -n -m --propagation private netns.sh REGISTRY_BIN REGISTRY_CONFIG HOSTS_FILE \
#          TEST_BINARY [ARGS...]
set -euo pipefail
registry=$1 config=$2 hosts=$3
shift 3
ip link set lo up
mount --bind "$hosts" /etc/hosts
"$registry" serve "$config" >>"${config%.yml}.log" 2>&1 &
reg_pid=$!
trap 'kill -9 "$reg_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  (exec 3<>/dev/tcp/127.0.0.1/443) 2>/dev/null && break
  kill -0 "$reg_pid" 2>/dev/null || { echo "netns.sh: docker-registry exited:" >&2; tail -20 "${config%.yml}.log" >&2; exit 3; }
  sleep 0.05
done
set +e
"$@"
status=$?
exit "$status"
