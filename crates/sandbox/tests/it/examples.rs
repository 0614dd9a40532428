//! The data-analyst example on real data (the Palmer penguins CSV from PyPI's `palmerpenguins`):
//! the Python version's statistics equal pandas' on the host from the same file, its chart is a
//! 1000 x 600 PNG; the TypeScript version's `returnData` equals host-computed figures. Through
//! `sandbox run` and through the HTTP API.

use sandbox_core::wire::FileContent;
use sandbox_core::ExecutionRequest;

use super::*;

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The dataset, fetched (and checked against its SHA-256) by the example's own script.
pub(crate) fn dataset() -> PathBuf {
    static DATA: OnceLock<PathBuf> = OnceLock::new();
    DATA.get_or_init(|| {
        let out = Command::new("bash").arg(repo().join("examples/data-analyst/fetch-data.sh")).output().unwrap();
        assert!(out.status.success(), "fetch-data.sh: {}", String::from_utf8_lossy(&out.stderr));
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// The installed python-analysis site directory, for running the same code on the host.
fn host_site() -> PathBuf {
    environments_installed();
    installed_dir("python-analysis").join("python")
}

/// Runs `script` with the host's python3 and the same packages, in a directory holding data.csv.
pub(crate) fn on_host(script: &Path, args: &[&str]) -> (String, PathBuf) {
    let dir = tempfile::Builder::new().prefix("host-").tempdir_in(&env().dir).unwrap().keep();
    std::fs::copy(dataset(), dir.join("data.csv")).unwrap();
    let out = Command::new("/usr/bin/python3")
        .arg("-I")
        .arg("-c")
        .arg(format!(
            "import sys; sys.path.insert(0, {:?}); sys.argv = [{:?}] + {:?}; exec(open({:?}).read())",
            host_site().display().to_string(),
            script.display().to_string(),
            args,
            script.display().to_string()
        ))
        .current_dir(&dir)
        .env("MPLBACKEND", "Agg")
        .env("MPLCONFIGDIR", dir.join(".mpl"))
        .output()
        .unwrap();
    assert!(out.status.success(), "host run of {}: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).unwrap(), dir)
}

pub(crate) fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&png[12..16], b"IHDR");
    (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()))
}

#[test]
fn python_example_matches_pandas_on_the_host_and_returns_the_chart() {
    let script = repo().join("examples/data-analyst/analysis.py");
    let data = dataset();
    let file_arg = format!("data.csv={}", data.display());
    let r = run("python-analysis", &std::fs::read_to_string(&script).unwrap(), &["--file", &file_arg]);
    assert_eq!(r.status(), "ok", "{r:?}");
    let (host_stdout, host_dir) = on_host(&script, &[]);
    assert_eq!(r.stdout(), host_stdout, "the sandbox's statistics are the host's");
    assert!(r.stdout().starts_with("rows: 344, complete rows: 342\n"), "{r:?}");
    assert!(r.stdout().contains("pearson r(flipper_length_mm, body_mass_g) = 0.871202"), "{r:?}");
    assert_eq!(r.stderr_of_program(), "", "{r:?}");
    let png = r.file_bytes("output.png").expect("output.png returned");
    assert_eq!(png_size(&png), (1000, 600));
    assert_eq!(png_size(&std::fs::read(host_dir.join("output.png")).unwrap()), (1000, 600));
    assert_eq!(r.json["files"]["output.png"]["mimeType"], "image/png");
    assert!(r.json["files"].get("data.csv").is_none(), "the unchanged input is not returned: {r:?}");
}

/// The TypeScript example's figures, computed on the host with pandas.
const HOST_FIGURES: &str = r#"
import json, pandas as pd
df = pd.read_csv("data.csv")
numeric = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
species = {}
for name, rows in df.groupby("species"):
    species[name] = {c: {"count": int(rows[c].count()), "mean": float(rows[c].mean()), "std": float(rows[c].std())} for c in numeric}
print(json.dumps({"rows": len(df), "completeRows": len(df.dropna(subset=numeric)), "species": species,
                  "flipperBodyMassR": float(df["flipper_length_mm"].corr(df["body_mass_g"]))}))
"#;

#[track_caller]
fn assert_close(got: &Value, want: &Value, at: &str) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            assert_eq!(g.keys().collect::<Vec<_>>(), w.keys().collect::<Vec<_>>(), "keys at {at}");
            for (k, wv) in w {
                assert_close(&g[k], wv, &format!("{at}.{k}"));
            }
        }
        (Value::Number(g), Value::Number(w)) => {
            let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
            assert!((g - w).abs() <= 1e-9 * w.abs().max(1.0), "{at}: {g} != {w}");
        }
        _ => assert_eq!(got, want, "{at}"),
    }
}

#[test]
fn typescript_example_returns_the_host_computed_figures() {
    let script = repo().join("examples/data-analyst/analysis.ts");
    let file_arg = format!("data.csv={}", dataset().display());
    let r = run("typescript-analysis", &std::fs::read_to_string(&script).unwrap(), &["--harness", "function", "--file", &file_arg]);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.stdout(), "rows: 344, species: Adelie, Chinstrap, Gentoo\n", "{r:?}");
    let host_script = scratch_file("figures.py", HOST_FIGURES.as_bytes());
    let (host, _) = on_host(&host_script, &[]);
    let want: Value = serde_json::from_str(&host).unwrap();
    assert_close(&r.json["returnData"], &want, "returnData");
}

#[test]
fn python_example_through_the_http_api() {
    environments_installed();
    let script = std::fs::read_to_string(repo().join("examples/data-analyst/analysis.py")).unwrap();
    let csv = std::fs::read_to_string(dataset()).unwrap();
    let server = super::http::Server::start("");
    let client = server.client(None);
    let mut req = ExecutionRequest { profile: "python-analysis".into(), code: script, ..Default::default() };
    req.files.insert("data.csv".into(), FileContent::Text(csv));
    req.outputs = vec!["*.png".into()];
    let r = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(client.execute(&req)).unwrap();
    assert_eq!(r.status.as_str(), "ok", "{r:?}");
    let (host_stdout, _) = on_host(&repo().join("examples/data-analyst/analysis.py"), &[]);
    assert_eq!(r.stdout, host_stdout);
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD.decode(&r.files["output.png"].base64).unwrap();
    assert_eq!(png_size(&png), (1000, 600));
    assert_eq!(r.files.len(), 1, "only *.png");
}
