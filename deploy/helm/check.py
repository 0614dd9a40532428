"""Validation of the Helm chart on paper (issue 15 item 4): `helm lint`, `helm template` for both
security profiles and both Kubernetes versions, the rendered manifests against Kubernetes' JSON
schemas (kubernetes-validate, strict), the deployment rules checked on the rendered YAML, and
negative cases showing each check can fail. One line per check, then `N passed, M failed in Xs`.

Run by deploy/helm/validate.sh, which provides helm and the Python packages:
    python check.py --helm PATH [--sandbox PATH]
"""

import argparse
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from fractions import Fraction

import kubernetes_validate
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CHART = os.path.join(HERE, "sandbox")
PROFILES = ("privileged", "userns")
KUBE_VERSIONS = ("1.33.0", "1.36.0")
RELEASE, NAMESPACE = "sb", "sandbox"
# Kinds that are CustomResourceDefinitions elsewhere: Kubernetes' own schemas do not know them.
CRD_KINDS = {"ServiceMonitor"}
# The built-in profiles' timeout_max_ms + grace_ms (crates/sandbox-core: python-default and
# typescript-default 300000 + 1000, the analysis profiles 120000 + 1000); the service's
# defaults where a configured profile leaves them out.
BUILTIN_LONGEST = {"python-default": 301000, "typescript-default": 301000, "python-analysis": 121000, "typescript-analysis": 121000}
DEFAULT_TIMEOUT_MAX_MS, DEFAULT_GRACE_MS = 300000, 1000
# Ids the sandboxes use above [runtime] uid_base: the program's uid 1000 + slot, 4096 slots.
UID_SPAN = 1000 + 4096


class Report:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.start = time.monotonic()

    def check(self, name, problems):
        """`problems`: a list of strings, empty when the check passed."""
        if problems:
            self.failed += 1
            print(f"FAIL {name}: " + "; ".join(problems))
        else:
            self.passed += 1
            print(f"ok   {name}")

    def skip(self, name, why):
        self.skipped += 1
        print(f"skip {name}: {why}")

    def summary(self):
        took = time.monotonic() - self.start
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        print(f"{self.passed} passed, {self.failed} failed{skipped} in {took:.1f}s")


# --- rendering -------------------------------------------------------------------------------


def helm(helm_bin, *args):
    return subprocess.run([helm_bin, *args], capture_output=True, text=True, timeout=60)


def values_file(profile):
    return os.path.join(CHART, "ci", f"{profile}-values.yaml")


def render(helm_bin, profile, kube_version, *extra, chart=CHART):
    """helm template; returns (documents, error text or None)."""
    r = helm(helm_bin, "template", RELEASE, chart, "-n", NAMESPACE, "--kube-version", kube_version, "-f", values_file(profile), *extra)
    if r.returncode != 0:
        return None, (r.stderr or r.stdout).strip()
    return [d for d in yaml.safe_load_all(r.stdout) if d], None


# --- what the rules look at --------------------------------------------------------------------


def workloads(docs):
    return [d for d in docs if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")]


def pod_specs(docs):
    for d in workloads(docs):
        yield d, d["spec"]["template"]["spec"]
    for d in docs:
        if d.get("kind") == "Pod":
            yield d, d["spec"]


def containers(spec):
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def main_container(spec):
    return next(c for c in spec["containers"] if c["name"] == "sandbox")


def merged_config(docs):
    """The configuration the pod's init container writes: config.toml then secret.toml."""
    cm = next(d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"].endswith("-config"))
    secret = next((d for d in docs if d.get("kind") == "Secret"), None)
    text = cm["data"]["config.toml"]
    if secret is not None:
        text += "\n" + secret["stringData"]["secret.toml"]
    return text


def longest_timeout_ms(config):
    each = dict(BUILTIN_LONGEST)
    for name, p in (config.get("profiles") or {}).items():
        limits = p.get("limits") or {}
        each[name] = limits.get("timeout_max_ms", DEFAULT_TIMEOUT_MAX_MS) + limits.get("grace_ms", DEFAULT_GRACE_MS)
    return max(each.values())


def quantity(q):
    """A Kubernetes quantity ("4", "500m", "8Gi", "1e3") as a Fraction."""
    q = str(q)
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
                "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
                "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
    for s in sorted(suffixes, key=len, reverse=True):
        if q.endswith(s):
            return Fraction(q[: -len(s)]) * suffixes[s]
    return Fraction(q)


# --- the rules ------------------------------------------------------------------------------
# Each returns a list of problems (empty: the rule holds).


def rule_no_host_network(docs, profile):
    out = []
    for d, spec in pod_specs(docs):
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(field):
                out.append(f"{d['kind']}/{d['metadata']['name']} sets {field}: true")
    return out


def rule_anti_affinity(docs, profile):
    deployments = [d for d in workloads(docs)]
    if len(deployments) != 1 or deployments[0]["kind"] != "Deployment":
        return [f"expected one Deployment, found {[d['kind'] for d in deployments]}"]
    d = deployments[0]
    tmpl = d["spec"]["template"]
    labels = tmpl["metadata"].get("labels") or {}
    terms = (((tmpl["spec"].get("affinity") or {}).get("podAntiAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or []
    for t in terms:
        match = (t.get("labelSelector") or {}).get("matchLabels") or {}
        if t.get("topologyKey") == "kubernetes.io/hostname" and match and all(labels.get(k) == v for k, v in match.items()):
            return []
    return ["no required pod anti-affinity on kubernetes.io/hostname selecting the pod's own labels"]


def rule_privileged_only_in_privileged_profile(docs, profile):
    out = []
    for d, spec in pod_specs(docs):
        annotated = (d["spec"]["template"]["metadata"].get("annotations") or {}).get("sandbox.dev/security-profile")
        if annotated != profile:
            out.append(f"pod annotation sandbox.dev/security-profile is {annotated!r}, rendered for {profile!r}")
        for c in containers(spec):
            privileged = bool((c.get("securityContext") or {}).get("privileged"))
            if privileged and (profile != "privileged" or c["name"] != "sandbox"):
                out.append(f"container {c['name']} is privileged under securityProfile {profile}")
            if profile == "privileged" and c["name"] == "sandbox" and not privileged:
                out.append("the sandbox container is not privileged under securityProfile privileged")
    return out


def rule_unmasked_procmount_only_with_host_users_false(docs, profile):
    out = []
    for d, spec in pod_specs(docs):
        for c in containers(spec):
            if (c.get("securityContext") or {}).get("procMount") == "Unmasked" and spec.get("hostUsers", True) is not False:
                out.append(f"container {c['name']} has procMount: Unmasked but the pod has no hostUsers: false")
    return out


def rule_userns_profile(docs, profile):
    """userns: the pod's own user namespace, Localhost seccomp and AppArmor, minimal capabilities,
    an unmasked /proc, and a uid_base whose ids fit 0-65535."""
    if profile != "userns":
        return []
    out = []
    for d, spec in pod_specs(docs):
        if spec.get("hostUsers") is not False:
            out.append("hostUsers is not false")
        sc = spec.get("securityContext") or {}
        for field in ("seccompProfile", "appArmorProfile"):
            if (sc.get(field) or {}).get("type") != "Localhost":
                out.append(f"pod securityContext.{field} is not Localhost")
        c = main_container(spec).get("securityContext") or {}
        caps = c.get("capabilities") or {}
        if caps.get("drop") != ["ALL"]:
            out.append("the sandbox container does not drop ALL capabilities")
        if c.get("procMount") != "Unmasked":
            out.append("the sandbox container's procMount is not Unmasked")
    config = tomllib.loads(merged_config(docs))
    base = config["runtime"]["uid_base"]
    if base < 1 or base + UID_SPAN > 65536:
        out.append(f"[runtime] uid_base {base}: ids {base}..{base + UID_SPAN - 1} do not fit 0-65535")
    return out


def rule_grace_period(docs, profile):
    """terminationGracePeriodSeconds covers the preStop sleep, the drain and the shutdown grace,
    and the shutdown grace covers the longest profile timeout + grace."""
    config = tomllib.loads(merged_config(docs))
    longest = longest_timeout_ms(config)
    svc = config["service"]
    out = []
    if svc["shutdown_grace_ms"] < longest:
        out.append(f"[service] shutdown_grace_ms {svc['shutdown_grace_ms']} < longest timeout + grace {longest}")
    for d, spec in pod_specs(docs):
        stop = ((main_container(spec).get("lifecycle") or {}).get("preStop") or {}).get("sleep", {}).get("seconds", 0)
        need_ms = stop * 1000 + svc.get("drain_delay_ms", 0) + max(svc["shutdown_grace_ms"], longest)
        have = spec.get("terminationGracePeriodSeconds", 30)
        if have * 1000 < need_ms:
            out.append(f"terminationGracePeriodSeconds {have} < preStop {stop} s + drain {svc.get('drain_delay_ms', 0)} ms + grace {max(svc['shutdown_grace_ms'], longest)} ms")
    return out


def rule_guaranteed_qos(docs, profile):
    out = []
    for d, spec in pod_specs(docs):
        for c in containers(spec):
            res = c.get("resources") or {}
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            for r in ("cpu", "memory"):
                if r not in lim:
                    out.append(f"container {c['name']} has no {r} limit")
                elif quantity(req.get(r, lim[r])) != quantity(lim[r]):
                    out.append(f"container {c['name']} {r} request {req.get(r)} != limit {lim[r]}")
    return out


def rule_probes_drain_node_id(docs, profile):
    out = []
    for d, spec in pod_specs(docs):
        c = main_container(spec)
        if ((c.get("livenessProbe") or {}).get("httpGet") or {}).get("path") != "/healthz":
            out.append("liveness probe is not GET /healthz")
        if ((c.get("readinessProbe") or {}).get("httpGet") or {}).get("path") != "/readyz":
            out.append("readiness probe is not GET /readyz")
        if not ((c.get("lifecycle") or {}).get("preStop")):
            out.append("no preStop hook")
        env = {e["name"]: e for e in c.get("env") or []}
        args = c.get("args") or []
        ref = (((env.get("POD_NAME") or {}).get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if ref != "metadata.name" or "--node-id" not in args or args[args.index("--node-id") + 1] != "$(POD_NAME)":
            out.append("--node-id is not the pod's name from the downward API")
    return out


RULES = [
    ("no host network", rule_no_host_network),
    ("required pod anti-affinity", rule_anti_affinity),
    ("privileged only in the privileged profile", rule_privileged_only_in_privileged_profile),
    ("Unmasked procMount only with hostUsers: false", rule_unmasked_procmount_only_with_host_users_false),
    ("userns profile shape", rule_userns_profile),
    ("grace period >= longest timeout + grace", rule_grace_period),
    ("Guaranteed QoS", rule_guaranteed_qos),
    ("probes, preStop, node id", rule_probes_drain_node_id),
]
RULE = dict(RULES)


def schema_problems(docs, kube_version):
    out = []
    for d in docs:
        if d["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(d, kube_version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            out.append(f"{d['kind']}/{d['metadata']['name']}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            out.append(e.message)
    return out


# --- the run ---------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helm", required=True)
    ap.add_argument("--sandbox", help="the sandbox binary: checks that it accepts the rendered configuration")
    a = ap.parse_args()
    rep = Report()

    # helm lint, strict (warnings fail), each profile.
    for profile in PROFILES:
        r = helm(a.helm, "lint", CHART, "--strict", "-f", values_file(profile))
        rep.check(f"helm lint --strict ({profile})", [] if r.returncode == 0 else [(r.stdout + r.stderr).strip()[-600:]])
    with tempfile.TemporaryDirectory() as tmp:
        broken = os.path.join(tmp, "sandbox")
        shutil.copytree(CHART, broken)
        with open(os.path.join(broken, "Chart.yaml")) as f:
            text = f.read()
        with open(os.path.join(broken, "Chart.yaml"), "w") as f:
            f.write("\n".join(l for l in text.splitlines() if not l.startswith("version:")) + "\n")
        r = helm(a.helm, "lint", broken, "--strict", "-f", values_file("privileged"))
        rep.check("negative: helm lint fails a chart without a version", [] if r.returncode != 0 else ["helm lint passed it"])

    rendered = {}
    for profile in PROFILES:
        for kv in KUBE_VERSIONS:
            docs, err = render(a.helm, profile, kv)
            rep.check(f"helm template {profile} (Kubernetes {kv})", [err[-600:]] if err else [])
            if docs is None:
                continue
            rendered[(profile, kv)] = docs
            kinds = sorted(d["kind"] for d in docs)
            crds = sorted(k for k in kinds if k in CRD_KINDS)
            note = f" ({', '.join(crds)}: a CRD, not in Kubernetes' schemas)" if crds else ""
            rep.check(f"schema {kv} strict {profile}: {len(kinds) - len(crds)} manifests{note}", schema_problems(docs, kv))

    for profile in PROFILES:
        docs = rendered.get((profile, KUBE_VERSIONS[-1]))
        if docs is None:
            continue
        for name, rule in RULES:
            rep.check(f"rule {name} ({profile})", rule(docs, profile))
        if a.sandbox:
            with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
                f.write(merged_config(docs))
                f.flush()
                r = subprocess.run([a.sandbox, "--config", f.name, "profiles", "list"], capture_output=True, text=True, timeout=60)
                problems = [r.stderr.strip()[-400:]] if r.returncode != 0 else ([] if "data-py" in r.stdout else ["profile data-py of the values is not listed"])
                rep.check(f"sandbox accepts the rendered config.toml + secret.toml ({profile})", problems)
        else:
            rep.skip(f"sandbox accepts the rendered configuration ({profile})", "no --sandbox binary (scripts/test.sh passes target/debug/sandbox)")

    # A misspelt profile field: the chart renders it (it does not know every field), the
    # service refuses it (deny_unknown_fields), so the check above must catch it.
    if a.sandbox:
        bad, err = render(a.helm, "privileged", KUBE_VERSIONS[-1], "--set-string", "sandbox.config=[profiles.x]\nlanguage = \"python\"\n[profiles.x.limits]\ntimeout_maxms = 1000\n")
        problems = [err[-300:]] if bad is None else []
        if bad is not None:
            with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
                f.write(merged_config(bad))
                f.flush()
                r = subprocess.run([a.sandbox, "--config", f.name, "profiles", "list"], capture_output=True, text=True, timeout=60)
                if r.returncode == 0:
                    problems.append("sandbox accepted it")
                elif "timeout_maxms" not in r.stderr:
                    problems.append(f"refused for another reason: {r.stderr.strip()[-300:]}")
        rep.check("negative: sandbox refuses a rendered config with a misspelt profile field", problems)
    else:
        rep.skip("negative: sandbox refuses a rendered config with a misspelt profile field", "no --sandbox binary")

    # What the chart computes follows the profiles: a 1-hour profile makes the grace period over an hour.
    docs, err = render(a.helm, "privileged", KUBE_VERSIONS[-1], "--set-string", "sandbox.config=[profiles.long]\nlanguage = \"python\"\n[profiles.long.limits]\ntimeout_max_ms = 3600000\n")
    if docs is None:
        rep.check("grace period follows a 1-hour profile", [err[-400:]])
    else:
        tgps = next(spec for _, spec in pod_specs(docs))["terminationGracePeriodSeconds"]
        want = 5 + 10 + (3600000 + 1000 + 5000) // 1000 + 10
        rep.check(f"grace period follows a 1-hour profile ({tgps} s)", [] if tgps == want else [f"terminationGracePeriodSeconds {tgps}, expected {want}"])

    # /metrics needs a key with role metrics: the ServiceMonitor sends the one its Secret holds,
    # and the service is told so (metrics_unauthenticated = false) unless the values open it.
    for opened in (False, True):
        extra = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.authorization.secretName=sb-metrics"]
        extra += ["--set", "metrics.unauthenticated=true"] if opened else []
        docs, err = render(a.helm, "privileged", KUBE_VERSIONS[-1], *extra)
        name = f"ServiceMonitor sends the metrics key; metrics_unauthenticated = {str(opened).lower()}"
        if docs is None:
            rep.check(name, [err[-400:]])
            continue
        problems = []
        endpoint = next(d for d in docs if d["kind"] == "ServiceMonitor")["spec"]["endpoints"][0]
        if endpoint.get("authorization") != {"type": "Bearer", "credentials": {"name": "sb-metrics", "key": "metrics-key"}}:
            problems.append(f"endpoint {endpoint}")
        service = tomllib.loads(merged_config(docs)).get("service", {})
        if service.get("metrics_unauthenticated") is not opened:
            problems.append(f"[service] metrics_unauthenticated = {service.get('metrics_unauthenticated')!r}")
        # The values' scraper key (profiles: []) runs nothing; a key without profiles runs any.
        keys = {k["name"]: k for k in service.get("api_keys", [])}
        if (keys.get("prometheus", {}).get("profiles"), keys.get("auditor", {}).get("profiles")) != ([], ["*"]):
            problems.append(f"api_keys {keys}")
        rep.check(name, problems)

    # The chart refuses values that would break a rule: helm template must fail, naming the value.
    refusals = [
        ("terminationGracePeriodSeconds below the longest timeout", "privileged", ["--set", "terminationGracePeriodSeconds=120"], "terminationGracePeriodSeconds 120 is below"),
        ("shutdownGraceMs below a 10-minute profile", "privileged", ["--set", "sandbox.shutdownGraceMs=300000"], "below the longest profile timeout_max_ms + grace_ms, 602000"),
        ("userns with uid_base 100000", "userns", ["--set", "sandbox.uidBase=100000"], "at most 60440"),
        ("an unknown securityProfile", "privileged", ["--set", "securityProfile=rootless"], "must be privileged or userns"),
        ("drainDelayMs shorter than the readiness probe's detection", "privileged", ["--set", "sandbox.drainDelayMs=2000"], "below the readiness probe"),
        ("no API keys", "privileged", ["--set", "secret.apiKeys=null"], "secret.apiKeys"),
        ("no PostgreSQL URL", "privileged", ["--set", "secret.auditUrl="], "secret.auditUrl"),
        ("a [service] table in sandbox.config", "privileged", ["--set-string", "sandbox.config=[service]\nqueue_max = 1\n"], "must not hold [service]"),
        ("sandbox.config that is not TOML", "privileged", ["--set-string", "sandbox.config=[profiles.x\n"], "not valid TOML"),
        ("a ServiceMonitor without the metrics key", "privileged", ["--set", "metrics.serviceMonitor.authorization.secretName="], "metrics.serviceMonitor.authorization.secretName"),
        ("Kubernetes 1.32 (below the chart's kubeVersion)", "privileged", [], "kubeVersion"),
    ]
    for name, profile, extra, expect in refusals:
        kv = "1.32.0" if "1.32" in name else KUBE_VERSIONS[-1]
        docs, err = render(a.helm, profile, kv, *extra)
        problems = ["helm template rendered it"] if docs is not None else ([] if expect in err else [f"failed without {expect!r}: {err[-300:]}"])
        rep.check(f"negative: chart refuses {name}", problems)

    # Each rule catches a rendering that breaks it (the chart cannot express these, so they are
    # edits of a good rendering, as a hand edit or another chart's overlay would make).
    def deployment(docs):
        return next(d for d in docs if d["kind"] == "Deployment")

    def spec_of(docs):
        return deployment(docs)["spec"]["template"]["spec"]

    def set_host_network(docs):
        spec_of(docs)["hostNetwork"] = True

    def preferred_affinity(docs):
        aa = spec_of(docs)["affinity"]["podAntiAffinity"]
        terms = aa.pop("requiredDuringSchedulingIgnoredDuringExecution")
        aa["preferredDuringSchedulingIgnoredDuringExecution"] = [{"weight": 100, "podAffinityTerm": t} for t in terms]

    def privileged_in_userns(docs):
        main_container(spec_of(docs))["securityContext"]["privileged"] = True

    def host_users_true(docs):
        spec_of(docs).pop("hostUsers")

    def short_grace(docs):
        spec_of(docs)["terminationGracePeriodSeconds"] = 300

    def burstable(docs):
        main_container(spec_of(docs))["resources"]["limits"]["memory"] = "16Gi"

    def runtime_default_seccomp(docs):
        spec_of(docs)["securityContext"]["seccompProfile"] = {"type": "RuntimeDefault"}

    def readiness_on_healthz(docs):
        main_container(spec_of(docs))["readinessProbe"]["httpGet"]["path"] = "/healthz"

    mutations = [
        ("no host network", "privileged", set_host_network),
        ("required pod anti-affinity", "privileged", preferred_affinity),
        ("privileged only in the privileged profile", "userns", privileged_in_userns),
        ("Unmasked procMount only with hostUsers: false", "userns", host_users_true),
        ("userns profile shape", "userns", runtime_default_seccomp),
        ("grace period >= longest timeout + grace", "privileged", short_grace),
        ("Guaranteed QoS", "userns", burstable),
        ("probes, preStop, node id", "privileged", readiness_on_healthz),
    ]
    for rule_name, profile, mutate in mutations:
        docs = rendered.get((profile, KUBE_VERSIONS[-1]))
        if docs is None:
            rep.check(f"negative: rule {rule_name} catches {mutate.__name__}", ["no rendering to edit"])
            continue
        bad = copy.deepcopy(docs)
        mutate(bad)
        found = RULE[rule_name](bad, profile)
        rep.check(f"negative: rule {rule_name} catches {mutate.__name__}", [] if found else ["the rule passed it"])

    # The schema check catches a wrong type and, strict, a misspelt field.
    docs = rendered.get(("userns", KUBE_VERSIONS[0]))
    if docs is not None:
        for what, mutate in [
            ("replicas as a string", lambda d: deployment(d)["spec"].__setitem__("replicas", "three")),
            ("a misspelt hostUser field", lambda d: spec_of(d).__setitem__("hostUser", False)),
        ]:
            for kv in KUBE_VERSIONS:
                bad = copy.deepcopy(docs)
                mutate(bad)
                rep.check(f"negative: schema {kv} catches {what}", [] if schema_problems(bad, kv) else ["the schema passed it"])

    rep.summary()
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
