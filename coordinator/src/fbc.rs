//! Reading file-based catalogs (FBC) as `opm` writes them: a directory tree of YAML and JSON
//! files, or one stream (what `opm render` prints and OLM v1's catalogd serves at
//! `/api/v1/all`). The blobs go to `aloft_api::catalog`, which models and checks them; this
//! module only finds and decodes them, naming each blob's file and position so a catalog
//! author can find the one that is wrong.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Why a catalog could not be read at all (a blob that reads but is wrong is the model's
/// business).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{source_name}: blob {index}: {message}")]
    Decode { source_name: String, index: usize, message: String },
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{0}: no .json, .yaml or .yml files found")]
    Empty(PathBuf),
}

/// The blobs of one stream, each named `<source_name>#<n>` (n from 1). A stream is JSON when it
/// starts with `{` (objects one after another, as `opm render -o json` writes them), else YAML
/// documents separated by `---`; empty documents are skipped.
pub fn blobs_of_stream(text: &str, source_name: &str) -> Result<Vec<(String, Value)>, ReadError> {
    let decode =
        |index: usize, message: String| ReadError::Decode { source_name: source_name.to_string(), index, message };
    let mut out = Vec::new();
    if text.trim_start().starts_with('{') {
        for (i, v) in serde_json::Deserializer::from_str(text).into_iter::<Value>().enumerate() {
            let v = v.map_err(|e| decode(i + 1, e.to_string()))?;
            out.push((format!("{source_name}#{}", i + 1), v));
        }
    } else {
        for (i, doc) in crate::yaml::documents(text).enumerate() {
            let v = doc.map_err(|e| decode(i + 1, e.to_string()))?;
            if !v.is_null() {
                out.push((format!("{source_name}#{}", i + 1), v));
            }
        }
    }
    Ok(out)
}

/// Every blob under `root` (a directory, walked in name order, or one file). Hidden entries
/// are skipped, as `opm` skips them; so are files that are neither JSON nor YAML (a catalog
/// directory often holds a README or an icon).
pub fn blobs_of_path(root: &Path) -> Result<Vec<(String, Value)>, ReadError> {
    let io = |path: &Path, error| ReadError::Io { path: path.to_path_buf(), error };
    let mut files = Vec::new();
    let meta = std::fs::metadata(root).map_err(|e| io(root, e))?;
    if meta.is_file() {
        files.push(root.to_path_buf());
    } else {
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&dir)
                .map_err(|e| io(&dir, e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| io(&dir, e))?;
            entries.sort_by_key(|e| e.file_name());
            for entry in entries.iter().rev() {
                let name = entry.file_name();
                if name.to_string_lossy().starts_with('.') {
                    continue;
                }
                let path = entry.path();
                let kind = entry.file_type().map_err(|e| io(&path, e))?;
                if kind.is_dir() {
                    dirs.push(path);
                } else if kind.is_file() && is_catalog_file(&path) {
                    files.push(path);
                }
            }
        }
        files.sort();
    }
    if files.is_empty() {
        return Err(ReadError::Empty(root.to_path_buf()));
    }
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| io(&f, e))?;
        let shown = f.strip_prefix(root).ok().filter(|p| !p.as_os_str().is_empty()).unwrap_or(&f);
        out.extend(blobs_of_stream(&text, &shown.display().to_string())?);
    }
    Ok(out)
}

/// Read and check the catalog at `path`; what it holds, in words, or every problem (one per
/// line), as `opm validate` reports them.
pub fn check_path(path: &Path) -> anyhow::Result<String> {
    let blobs = blobs_of_path(path)?;
    let catalog = aloft_api::catalog::Catalog::from_blobs(blobs)
        .map_err(|e| anyhow::anyhow!("{}: invalid catalog:\n{e}", path.display()))?;
    let plural = crate::controllers::pick::plural;
    Ok(format!("{}, {}", plural(catalog.packages.len(), "package"), plural(catalog.bundles.len(), "bundle")))
}

/// The blobs of a valid catalog, in file order, for serving as one stream.
pub fn render_path(path: &Path) -> anyhow::Result<Vec<Value>> {
    let blobs = blobs_of_path(path)?;
    aloft_api::catalog::Catalog::from_blobs(blobs.clone())
        .map_err(|e| anyhow::anyhow!("{}: invalid catalog:\n{e}", path.display()))?;
    Ok(blobs.into_iter().map(|(_, v)| v).collect())
}

fn is_catalog_file(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("json" | "yaml" | "yml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_streams_name_each_blob() {
        let json = "{\"schema\":\"olm.package\",\"name\":\"a\"}\n{\"schema\":\"olm.channel\",\"name\":\"s\"}";
        let blobs = blobs_of_stream(json, "all.json").expect("reads");
        assert_eq!(blobs.len(), 2);
        assert_eq!(blobs[1].0, "all.json#2");
        assert_eq!(blobs[1].1["schema"], "olm.channel");
        let yaml = "---\nschema: olm.package\nname: a\n---\n---\nschema: olm.bundle\nname: b\n";
        let blobs = blobs_of_stream(yaml, "c.yaml").expect("reads");
        assert_eq!(blobs.iter().map(|b| b.0.as_str()).collect::<Vec<_>>(), ["c.yaml#1", "c.yaml#3"]);
        let bad = blobs_of_stream("{\"schema\": \"olm.package\"}\n{\"name\": ", "x.json").expect_err("cut short");
        assert!(bad.to_string().starts_with("x.json: blob 2: "), "{bad}");
        let bad = blobs_of_stream("schema: [unclosed\n", "y.yaml").expect_err("bad YAML");
        assert!(bad.to_string().starts_with("y.yaml: blob 1: "), "{bad}");
        // Aliases that expand past the file's own size (a billion laughs in a catalog image).
        let mut laughs = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (name, prev) in [("b", "a"), ("c", "b"), ("d", "c"), ("e", "d"), ("f", "e"), ("g", "f")] {
            laughs.push_str(&format!("{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let refused =
            blobs_of_stream(&format!("---\nschema: olm.package\n---\n{laughs}"), "l.yaml").expect_err("laughs");
        assert!(refused.to_string().starts_with("l.yaml: blob 2: "), "{refused}");
    }

    #[test]
    fn a_directory_is_walked_in_order_without_hidden_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("b/.git")).expect("mkdir");
        std::fs::write(dir.path().join("b/catalog.yaml"), "schema: olm.package\nname: b\n").expect("write");
        std::fs::write(dir.path().join("b/.git/x.json"), "{\"schema\":\"hidden\"}").expect("write");
        std::fs::write(dir.path().join("b/README.md"), "not a catalog").expect("write");
        std::fs::write(dir.path().join("a.json"), "{\"schema\":\"olm.package\",\"name\":\"a\"}").expect("write");
        let blobs = blobs_of_path(dir.path()).expect("reads");
        let names: Vec<_> = blobs.iter().map(|b| b.0.as_str()).collect();
        assert_eq!(names, ["a.json#1", "b/catalog.yaml#1"]);
        let empty = tempfile::tempdir().expect("tempdir");
        assert!(matches!(blobs_of_path(empty.path()), Err(ReadError::Empty(_))));
        assert!(matches!(blobs_of_path(&dir.path().join("missing")), Err(ReadError::Io { .. })));
    }
}
