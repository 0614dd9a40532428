//! The crate graph of ARCHITECTURE.md ("Dependencies point down only"), enforced: each crate of
//! the workspace may depend (normal and build dependencies) only on the crates [`ALLOWED`] lists
//! for it, read from `cargo metadata`. A new crate must be added here and to ARCHITECTURE.md.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

/// For each crate of ours, the crates of ours it may depend on directly (every edge points
/// down): the runtime knows nothing of core, profiles, HTTP, MCP or audit; the network path
/// nothing of the engine; the audit log knows core and the runtime's process owner check
/// only, the client core only; the server calls no runtime code itself (only the engine does).
const ALLOWED: &[(&str, &[&str])] = &[
    ("sandbox-core", &[]),
    ("sandbox-runtime", &[]),
    ("sandbox-warm", &["sandbox-runtime"]),
    // Parses hostile image bytes as host root: knows nothing of ours.
    ("sandbox-oci", &[]),
    ("sandbox-network", &["sandbox-core", "sandbox-runtime"]),
    ("sandbox-engine", &["sandbox-core", "sandbox-runtime", "sandbox-network", "sandbox-oci"]),
    // The runtime for its process owner check (process.rs) only.
    ("sandbox-audit", &["sandbox-core", "sandbox-runtime"]),
    ("sandbox-client", &["sandbox-core"]),
    ("sandbox-mcp", &["sandbox-core", "sandbox-engine"]),
    ("sandbox-server", &["sandbox-core", "sandbox-engine", "sandbox-audit", "sandbox-mcp"]),
    // The binary: every door, and the runtime for its helper and self-test entry points.
    ("sandbox", &["sandbox-core", "sandbox-runtime", "sandbox-warm", "sandbox-engine", "sandbox-audit", "sandbox-client", "sandbox-mcp", "sandbox-server"]),
];

/// The workspace's crates and, for each, the workspace crates it depends on (normal and build
/// dependencies; dev-dependencies are the tests' business).
fn workspace_graph() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let ours: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .filter_map(|d| d["name"].as_str())
                .filter(|d| ours.contains(d))
                .map(str::to_owned)
                .collect();
            (p["name"].as_str().expect("a package name").to_owned(), deps)
        })
        .collect()
}

/// Every edge of `graph` that `allowed` does not permit, and every crate it does not know, one
/// line each.
fn violations(graph: &BTreeMap<String, Vec<String>>, allowed: &[(&str, &[&str])]) -> Vec<String> {
    let mut found = Vec::new();
    for (krate, deps) in graph {
        let Some((_, may)) = allowed.iter().find(|(name, _)| name == krate) else {
            found.push(format!("{krate}: a crate the dependency rules do not know (add it to deps.rs and ARCHITECTURE.md)"));
            continue;
        };
        for dep in deps {
            if !may.contains(&dep.as_str()) {
                found.push(format!("{krate} → {dep}: not allowed (ARCHITECTURE.md, \"Dependencies point down only\")"));
            }
        }
    }
    found
}

#[test]
fn crates_depend_only_downwards() {
    let graph = workspace_graph();
    assert!(graph.contains_key("sandbox-core") && graph.contains_key("sandbox"), "cargo metadata lists the workspace: {graph:?}");
    let found = violations(&graph, ALLOWED);
    assert!(found.is_empty(), "dependency rules broken:\n{}", found.join("\n"));
}

#[test]
fn the_dependency_check_refuses_edges_against_the_rules() {
    let graph = |edges: &[(&str, &[&str])]| -> BTreeMap<String, Vec<String>> {
        edges.iter().map(|(k, deps)| ((*k).to_owned(), deps.iter().map(|d| (*d).to_owned()).collect())).collect()
    };
    let check = |edges: &[(&str, &[&str])], want: &[&str]| {
        let got = violations(&graph(edges), ALLOWED);
        assert_eq!(got.iter().map(|v| v.split(':').next().unwrap()).collect::<Vec<_>>(), want, "{got:?}");
    };
    check(&[("sandbox-engine", &["sandbox-runtime", "sandbox-core"])], &[]);
    check(&[("sandbox-runtime", &["sandbox-core"])], &["sandbox-runtime → sandbox-core"]);
    check(&[("sandbox-audit", &["sandbox-core", "sandbox-engine"])], &["sandbox-audit → sandbox-engine"]);
    check(&[("sandbox-network", &["sandbox-engine"])], &["sandbox-network → sandbox-engine"]);
    check(&[("sandbox-server", &["sandbox-engine", "sandbox-runtime"])], &["sandbox-server → sandbox-runtime"]);
    check(&[("sandbox-core", &["sandbox-runtime"])], &["sandbox-core → sandbox-runtime"]);
    check(&[("sandbox-newcomer", &[])], &["sandbox-newcomer"]);
}
