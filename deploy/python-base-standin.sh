#!/usr/bin/env bash
# Builds a local stand-in for the `python:3.11-slim` base image, for machines whose Docker
# engine cannot reach Docker Hub (the Dockerfile's FROM then finds this local image and
# pulls nothing). Same layout as the official image: Debian bookworm, Python 3.11 with
# `python` and `pip` in /usr/local/bin and packages in /usr/local/lib/python3.11/site-packages
# (here a venv of Debian's python3.11 made at /usr/local, so `pip install --prefix=/install`
# lays files out as the official image does). The host's extra CA certificates
# (/usr/local/share/ca-certificates) are trusted inside, for a TLS-intercepting egress proxy.
#
# Needs root, debootstrap and a Docker engine:
#   apt-get install -y debootstrap docker.io && (dockerd >/var/log/dockerd.log 2>&1 &)
#   deploy/python-base-standin.sh && deploy/docker-smoke.sh
set -euo pipefail
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3.11,python3-venv,ca-certificates \
  bookworm "$root" "$mirror"
chroot "$root" python3.11 -m venv /usr/local
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
fi
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import --change 'CMD ["python3"]' - python:3.11-slim
docker run --rm python:3.11-slim python -c 'import sys; print("stand-in python:3.11-slim:", sys.version)'
