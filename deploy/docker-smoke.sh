#!/usr/bin/env bash
# Smoke test of the container image: build it, run it with a data volume, wait for the
# HEALTHCHECK, produce and consume with kcat, restart the container and read the data back.
# Needs a Docker engine and kcat.
set -euo pipefail
cd "$(dirname "$0")/.."
image=groupcoord:smoke
name=groupcoord-smoke-$$
volume=groupcoord-smoke-$$
port=${PORT:-19092}
docker build -t "$image" .
cleanup() { docker rm -f "$name" >/dev/null 2>&1 || true; docker volume rm "$volume" >/dev/null 2>&1 || true; }
trap cleanup EXIT
start() {
  docker run -d --name "$name" -p "127.0.0.1:$port:9092" -v "$volume:/var/lib/groupcoord/data" \
    -e GROUPCOORD_ADVERTISED_LISTENER="127.0.0.1:$port" "$image" >/dev/null
  for _ in $(seq 60); do
    [ "$(docker inspect -f '{{.State.Health.Status}}' "$name")" = healthy ] && return 0
    sleep 1
  done
  docker logs "$name"; echo "container never became healthy" >&2; exit 1
}
start
[ "$(docker exec "$name" id -u)" != 0 ] || { echo "runs as root" >&2; exit 1; }
seq 1 100 | kcat -P -b "127.0.0.1:$port" -t smoke -p 0
docker stop -t 20 "$name" >/dev/null   # SIGTERM: graceful stop must exit 0
[ "$(docker inspect -f '{{.State.ExitCode}}' "$name")" = 0 ] || { echo "unclean exit" >&2; exit 1; }
docker rm "$name" >/dev/null
start
count=$(kcat -C -b "127.0.0.1:$port" -t smoke -o beginning -e -q | wc -l)
[ "$count" = 100 ] || { echo "expected 100 records after restart, got $count" >&2; exit 1; }
echo "docker smoke test passed"
