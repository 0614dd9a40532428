//! Imports an OCI image layout or oci-archive into a new directory and prints the `Imported`
//! as JSON: `cargo run -p sandbox-oci --example import -- [--skip-device-nodes] SOURCE DEST [REFERENCE]`.
//! For trying real images by hand (`podman save --format oci-archive -o img.tar IMAGE`).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;
use std::process::ExitCode;

use sandbox_oci::{import, ImportOptions};

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let skip_device_nodes = args.first().is_some_and(|a| a == "--skip-device-nodes");
    if skip_device_nodes {
        args.remove(0);
    }
    let [source, dest, rest @ ..] = args.as_slice() else {
        eprintln!("usage: import [--skip-device-nodes] SOURCE DEST [REFERENCE]");
        return ExitCode::from(2);
    };
    let opts = ImportOptions { reference: rest.first().cloned(), skip_device_nodes, ..ImportOptions::default() };
    let started = std::time::Instant::now();
    match import(Path::new(source), Path::new(dest), &opts) {
        Ok(mut imported) => {
            imported.image.config_json.clear(); // printed as the fields above it
            println!("{}", serde_json::to_string_pretty(&imported).expect("an Imported serializes"));
            eprintln!("imported in {:.2?}", started.elapsed());
            ExitCode::SUCCESS
        }
        Err(err) => {
            let mut message = err.to_string();
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                message += &format!(": {cause}");
                source = cause.source();
            }
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
