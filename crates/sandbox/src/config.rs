//! Finding and loading the configuration file and the data directory.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sandbox_core::Config;

/// The built-in configuration with the user's file laid over it: `explicit` if given (it must
/// exist), else the first existing file of the search path.
pub fn load(explicit: Option<&Path>) -> anyhow::Result<Config> {
    let builtin = Config::builtin();
    let path = match explicit {
        Some(p) => Some(p.to_owned()),
        None => search_path().into_iter().find(|p| p.is_file()),
    };
    let Some(path) = path else { return Ok(builtin) };
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read config file {}", path.display()))?;
    let file = path.display().to_string();
    let mut config = builtin.parse_layered(&text, &file).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    // Lock files are named relative to the config file.
    let base = path.parent().map(Path::to_owned).unwrap_or_default();
    config.load_locks(&file, &base, |p| std::fs::read_to_string(p)).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    Ok(config)
}

fn search_path() -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Some(p) = std::env::var_os("SANDBOX_CONFIG") {
        paths.push(PathBuf::from(p));
    }
    let config_home = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(c) = config_home {
        paths.push(c.join("sandbox/config.toml"));
    }
    paths.push(PathBuf::from("/etc/sandbox/config.toml"));
    paths
}

/// `explicit` (`--data-dir`), else `[runtime] data_dir` of the config, else `$SANDBOX_DATA_DIR`,
/// else `/var/lib/sandbox` for root, else `$XDG_STATE_HOME/sandbox` (`~/.local/state/sandbox`).
pub fn data_dir(explicit: Option<&Path>, config: &Config) -> PathBuf {
    let chosen = chosen_data_dir(explicit.or(config.runtime.data_dir.as_deref()));
    // Relative paths are taken from the current directory once, here.
    std::path::absolute(&chosen).unwrap_or(chosen)
}

fn chosen_data_dir(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_owned();
    }
    if let Some(p) = std::env::var_os("SANDBOX_DATA_DIR") {
        return PathBuf::from(p);
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/sandbox");
    }
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join("sandbox")
}

/// This node's id: `[service] node_id` (or `--node-id`), else the host name
/// (gethostname(2): in Kubernetes the pod's name), else `node`.
pub fn node_id(config: &Config) -> String {
    if let Some(id) = config.service.node_id.as_deref().filter(|id| !id.is_empty()) {
        return id.to_owned();
    }
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).filter(|h| !h.is_empty()).unwrap_or_else(|| "node".into())
}
