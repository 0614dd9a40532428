//! The tools' contracts: argument types (deserialized from `tools/call`) and the shapes of
//! `structuredContent`, each with a JSON Schema (draft 2020-12, schemars) a model can act on.
//!
//! The arguments are MCP's own (names a model reads well: `timeout_ms`; no `stdin`, `outputs`,
//! `env`), on the core wire types ([`Language`], [`Harness`], [`FileContent`]). The output
//! schemas are the core wire types' ([`ExecutionResult`], [`ProfileList`]), derived with
//! schemars; [`execute_output_schema`] applies the one adaptation [`crate::render`] makes to a
//! result (files by resource URI instead of bytes, long streams cut), which is all that is
//! written here. A unit test checks that every field a result can carry is described.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::JsonObject;
use sandbox_core::wire::{FileContent, Harness, Language, ProfileList};
use sandbox_core::ExecutionResult;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

/// Arguments of `sandbox_execute_code`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteArgs {
    /// The program's complete source code. Python runs as a script (`python3 main.py`);
    /// TypeScript runs as an ES module on Node.js (top-level await, Node built-ins, type
    /// annotations stripped). Print results to stdout; write files to the working directory
    /// (/workspace) to return them (PNG/JPEG files come back as images).
    pub code: String,
    /// Language of `code`: `python` or `typescript`. It must match the profile's language.
    pub language: Language,
    /// How the code is invoked: `script` (run the file; stdout is the output) or `function`
    /// (call `main(input)` and return its JSON result as `returnData`). Default: the profile's.
    #[serde(default)]
    pub harness: Option<Harness>,
    /// Profile (policy: runtime, limits, network) to run under. Default: `python-default` or
    /// `typescript-default` for the language, else the first profile of that language you may use.
    #[serde(default)]
    pub profile: Option<String>,
    /// Wall-clock timeout in milliseconds (as `timeout` in the HTTP API and the SDKs; 20 s is
    /// 20000), at least 100. Default: the profile's `timeoutMs`; at most its `timeoutMaxMs`. A
    /// program still running then is killed (status `timeout`).
    #[serde(default)]
    #[schemars(range(min = 100))]
    pub timeout: Option<u64>,
    /// The same as `timeout` (its older name; give one of the two).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Input files written to the working directory before the program starts, by relative
    /// name (e.g. `data.csv`, `in/config.json`; no `..`, no leading `/`). A value is the file's
    /// UTF-8 text, or `{"base64": "..."}` for bytes.
    #[serde(default)]
    pub files: BTreeMap<String, FileContent>,
    /// JSON value passed as `main(input)` with the `function` harness.
    #[serde(default)]
    pub input: Option<serde_json::Value>,
}

/// Arguments of `sandbox_list_profiles` (none).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListProfilesArgs {}

/// `structuredContent` of `sandbox_execute_code`: the HTTP API's result object
/// (`POST /v1/executions`, [`ExecutionResult`]'s schema), except that output files carry a
/// resource `uri` instead of their bytes (`FileOut`; the bytes are image or embedded-resource
/// content blocks of the same result when they fit, else read with `resources/read`), that
/// `stdoutBase64`/`stderrBase64` are left out, and that stdout/stderr past 256 KiB / 128 KiB are
/// cut here (`Omitted`; the whole stream is the resource `sandbox://executions/{executionId}/stdout`
/// or `.../stderr`), likewise `returnData` past 128 KiB (`.../return-data`). The whole result
/// stays under 900 KiB.
pub fn execute_output_schema() -> Arc<JsonObject> {
    let mut schema = (*rmcp::handler::server::common::schema_for_output::<ExecutionResult>()).clone();
    let file = rmcp::handler::server::common::schema_for_output::<FileOut>();
    let omitted = rmcp::handler::server::common::schema_for_output::<Omitted>();
    schema.insert("title".into(), json!("ExecuteOutput"));
    schema.insert("description".into(), json!(EXECUTE_OUTPUT_DESCRIPTION));
    let props = schema.get_mut("properties").and_then(Value::as_object_mut).expect("ExecutionResult's schema has properties");
    for gone in ["stdoutBase64", "stderrBase64"] {
        props.remove(gone);
    }
    let mut files = file.as_ref().clone();
    files.remove("$schema");
    files.remove("title");
    files.insert("description".into(), json!("One output file."));
    let described = props["files"]["description"].clone();
    props.insert("files".into(), json!({ "description": described, "type": "object", "additionalProperties": files }));
    for (name, prop) in omitted.get("properties").and_then(Value::as_object).expect("Omitted has properties") {
        props.insert(name.clone(), prop.clone());
    }
    if let Some(defs) = schema.get_mut("$defs").and_then(Value::as_object_mut) {
        defs.remove("OutputFile");
    }
    Arc::new(plain_enums(schema))
}

/// `schema` with each enumeration of strings written as `{"type": "string", "enum": [...]}`
/// (an optional one as `{"type": ["string", "null"], "enum": [..., null]}`) rather than the
/// `oneOf` of documented constants schemars writes, each value's doc appended to the
/// description: the form the tool schemas have always had, which clients and models read.
fn plain_enums(mut schema: JsonObject) -> JsonObject {
    let defs = schema.get("$defs").cloned().unwrap_or_default();
    for value in schema.values_mut() {
        flatten_enums(value, &defs);
    }
    schema
}

fn flatten_enums(value: &mut Value, defs: &Value) {
    let Value::Object(map) = value else {
        if let Value::Array(items) = value {
            items.iter_mut().for_each(|v| flatten_enums(v, defs));
        }
        return;
    };
    map.values_mut().for_each(|v| flatten_enums(v, defs));
    // A documented enumeration: oneOf [{type: string, const, description}...].
    if let Some(Value::Array(alternatives)) = map.get("oneOf") {
        let consts: Option<Vec<(Value, String)>> = alternatives
            .iter()
            .map(|a| {
                (a.get("type") == Some(&json!("string")))
                    .then(|| a.get("const").cloned())
                    .flatten()
                    .map(|c| (c, a["description"].as_str().unwrap_or_default().to_owned()))
            })
            .collect();
        if let Some(consts) = consts {
            let notes: Vec<String> = consts.iter().filter(|(_, d)| !d.is_empty()).map(|(c, d)| format!("`{}`: {d}", c.as_str().unwrap_or_default())).collect();
            map.remove("oneOf");
            map.insert("type".into(), json!("string"));
            map.insert("enum".into(), Value::Array(consts.into_iter().map(|(c, _)| c).collect()));
            if !notes.is_empty() {
                let base = map.get("description").and_then(Value::as_str).map(|d| format!("{d}\n")).unwrap_or_default();
                map.insert("description".into(), json!(format!("{base}{}", notes.join("\n"))));
            }
        }
    }
    // An optional enumeration: anyOf [{$ref to a string enum}, {type: null}].
    if let Some(Value::Array(alternatives)) = map.get("anyOf") {
        if let [first, null] = alternatives.as_slice() {
            let target = first.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/")).and_then(|name| defs.get(name));
            let target = target.map(|t| {
                let mut t = t.clone();
                flatten_enums(&mut t, defs);
                t
            });
            if let (Some(t), true) = (target, null == &json!({"type": "null"})) {
                if t.get("type") == Some(&json!("string")) {
                    if let Some(Value::Array(values)) = t.get("enum") {
                        let mut values = values.clone();
                        values.push(Value::Null);
                        map.remove("anyOf");
                        map.insert("type".into(), json!(["string", "null"]));
                        map.insert("enum".into(), Value::Array(values));
                    }
                }
            }
        }
    }
}

const EXECUTE_OUTPUT_DESCRIPTION: &str = "The HTTP API's result object (POST /v1/executions), except that output files \
     carry a resource `uri` instead of their bytes (the bytes are image or embedded-resource content blocks of the same \
     result when they fit, else read with resources/read), and that stdout/stderr past 256 KiB / 128 KiB are cut here \
     (stdoutOmittedBytes, stderrOmittedBytes; the whole stream is the resource sandbox://executions/{executionId}/stdout \
     or .../stderr), likewise returnData past 128 KiB (.../return-data). The whole result stays under 900 KiB.";

/// `structuredContent` of `sandbox_list_profiles`: the HTTP API's `GET /v1/profiles` body.
pub fn profiles_output_schema() -> Arc<JsonObject> {
    Arc::new(plain_enums((*rmcp::handler::server::common::schema_for_output::<ProfileList>()).clone()))
}

/// One output file as `structuredContent` describes it (in place of [`sandbox_core::wire::OutputFile`]).
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "describes structuredContent; never built")]
struct FileOut {
    /// Size in bytes.
    size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    sha256: String,
    /// MIME type from the extension.
    mime_type: String,
    /// `sandbox://executions/{executionId}/files/{name}`: read it with `resources/read`.
    uri: String,
    /// Whether the bytes are a content block of this result (`image` for PNG/JPEG, else an
    /// embedded resource); false when they did not fit the result's size budget.
    inline: bool,
}

/// The fields `structuredContent` adds to a result when it cuts one.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "describes structuredContent; never built")]
struct Omitted {
    /// Bytes of captured stdout not included in `stdout` here (read the stdout resource).
    #[serde(skip_serializing_if = "Option::is_none")]
    stdout_omitted_bytes: Option<u64>,
    /// Bytes of captured stderr not included in `stderr` here (read the stderr resource).
    #[serde(skip_serializing_if = "Option::is_none")]
    stderr_omitted_bytes: Option<u64>,
    /// Size of `returnData` as JSON when it was left out for size (read the resource
    /// `sandbox://executions/{executionId}/return-data`).
    #[serde(skip_serializing_if = "Option::is_none")]
    return_data_omitted_bytes: Option<u64>,
}
