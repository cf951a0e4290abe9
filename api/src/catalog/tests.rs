//! The catalog module against real catalogs (community-operators-prod, operator-registry's and
//! OLM's test catalogs) and against hostile input.

use super::*;
use semver::Version;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

fn testdata(rel: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/testdata")).join(rel)
}

/// The blobs of one YAML or JSON stream, named as the coordinator names them.
fn blobs_of(path: &Path, name: &str) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let values: Vec<Value> = if text.trim_start().starts_with('{') {
        serde_json::Deserializer::from_str(&text).into_iter::<Value>().map(Result::unwrap).collect()
    } else {
        yaml_serde::Deserializer::from_str(&text).map(|doc| Value::deserialize(doc).unwrap()).collect()
    };
    values.into_iter().filter(|v| !v.is_null()).enumerate().map(|(i, v)| (format!("{name}#{}", i + 1), v)).collect()
}

/// Every package of a community catalog snapshot: (package dir, its blobs).
fn community(version: &str) -> Vec<(String, Vec<(String, Value)>)> {
    let dir = testdata(&format!("fbc-community-operators/{version}"));
    let mut packages: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    packages.sort();
    packages
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            let blobs = blobs_of(&p.join("catalog.yaml"), &format!("{name}/catalog.yaml"));
            (name, blobs)
        })
        .collect()
}

/// Facts read straight from the raw blobs, to check the model against.
#[derive(Default, Debug)]
struct Raw {
    packages: usize,
    channels: usize,
    bundles: usize,
    gvk_required: usize,
    package_required: usize,
    /// (package, channel) -> the entries no other entry of the channel replaces or skips.
    heads: BTreeMap<(String, String), Vec<String>>,
}

fn raw(blobs: &[(String, Value)]) -> Raw {
    let mut r = Raw::default();
    for (_, b) in blobs {
        match b["schema"].as_str() {
            Some("olm.package") => r.packages += 1,
            Some("olm.channel") => {
                r.channels += 1;
                let entries = b["entries"].as_array().unwrap();
                let mut named: HashSet<&str> = HashSet::new();
                for e in entries {
                    named.extend(e["replaces"].as_str());
                    named.extend(e["skips"].as_array().into_iter().flatten().filter_map(Value::as_str));
                }
                let heads = entries.iter().filter_map(|e| e["name"].as_str()).filter(|n| !named.contains(n));
                r.heads.insert(
                    (b["package"].as_str().unwrap().into(), b["name"].as_str().unwrap().into()),
                    heads.map(str::to_string).collect(),
                );
            }
            Some("olm.bundle") => {
                r.bundles += 1;
                for p in b["properties"].as_array().into_iter().flatten() {
                    match p["type"].as_str() {
                        Some("olm.gvk.required") => r.gvk_required += 1,
                        Some("olm.package.required") => r.package_required += 1,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    r
}

/// From every entry of every channel, follow upgrade_target to the head: it must get there, each
/// hop moving nearer the head. The number of hops taken in all.
fn walk_every_channel(c: &Catalog) -> usize {
    let mut hops = 0;
    for ch in &c.channels {
        let order = ch.order().unwrap();
        let head = &order[0].name;
        let rank = |name: &str| order.iter().position(|e| e.name == name);
        for start in &order {
            let mut at = start.name.clone();
            while let Some(next) = c
                .upgrade_target(
                    &ch.package,
                    Some(&ch.name),
                    &at,
                    c.bundle(&ch.package, &at).and_then(Bundle::version).as_ref(),
                )
                .unwrap()
            {
                assert!(rank(&next.name) < rank(&at), "{}/{}: {at} -> {}", ch.package, ch.name, next.name);
                at = next.name.clone();
                hops += 1;
            }
            assert_eq!(&at, head, "{}/{}: from {} stuck at {at}", ch.package, ch.name, start.name);
        }
    }
    hops
}

fn check_heads(c: &Catalog, raw: &Raw) {
    assert_eq!(c.channels.len(), raw.heads.len());
    for ch in &c.channels {
        let want = &raw.heads[&(ch.package.clone(), ch.name.clone())];
        assert_eq!(want.len(), 1, "{}/{}", ch.package, ch.name);
        assert_eq!(ch.head().unwrap().name, want[0]);
        assert_eq!(ch.order().unwrap()[0].name, want[0]);
    }
}

#[test]
fn community_v4_20_catalog() {
    let packages = community("v4.20");
    assert_eq!(packages.len(), 37);
    // Each package's file is a catalog of its own, and all of them validate.
    let mut failing = Vec::new();
    for (name, blobs) in &packages {
        if let Err(e) = Catalog::from_blobs(blobs.clone()) {
            failing.push(format!("{name}: {e}"));
        }
    }
    assert_eq!(failing, Vec::<String>::new());

    let all: Vec<(String, Value)> = packages.into_iter().flat_map(|(_, b)| b).collect();
    let raw = raw(&all);
    let c = Catalog::from_blobs(all).unwrap();
    assert_eq!((raw.packages, raw.channels, raw.bundles), (37, 85, 803));
    assert_eq!((c.packages.len(), c.channels.len(), c.bundles.len(), c.others.len()), (37, 85, 803, 0));
    assert_eq!(c.bundles.iter().map(|b| b.required_gvks().len()).sum::<usize>(), raw.gvk_required);
    assert_eq!(c.bundles.iter().map(|b| b.required_packages().len()).sum::<usize>(), raw.package_required);
    assert_eq!((raw.gvk_required, raw.package_required), (40, 8));
    assert!(c.bundles.iter().all(|b| b.version().is_some() && b.csv_metadata().is_some()));
    assert!(c.bundles.iter().all(|b| b.objects().unwrap().is_empty() && b.max_openshift_version().is_none()));
    assert_eq!(c.bundles.iter().map(|b| b.provided_gvks().len()).sum::<usize>(), 6845);
    check_heads(&c, &raw);
    assert_eq!(c.channels.iter().map(|ch| ch.entries.len()).sum::<usize>(), 929);
    assert_eq!(walk_every_channel(&c), 10982);

    let summary = c.packages();
    assert_eq!(summary.len(), 37);
    assert_eq!(summary.iter().map(|p| p.channels.len()).sum::<usize>(), 85);
    for p in &summary {
        assert!(p.channels.iter().any(|ch| ch.name == p.default_channel), "{}", p.name);
        for ch in &p.channels {
            assert_eq!(ch.head, raw.heads[&(p.name.clone(), ch.name.clone())][0]);
            let b = c.bundle(&p.name, &ch.head).unwrap();
            assert_eq!(ch.version, b.version());
            assert!(ch.display_name.is_some() && ch.description.is_some() && ch.csv_metadata.is_some());
        }
    }
    let quay = summary.iter().find(|p| p.name == "project-quay").unwrap();
    assert_eq!(quay.default_channel, c.package("project-quay").unwrap().default_channel);
}

#[test]
fn community_v4_12_catalog_with_inline_manifests() {
    let packages = community("v4.12");
    assert_eq!(packages.len(), 10);
    for (name, blobs) in &packages {
        Catalog::from_blobs(blobs.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let all: Vec<(String, Value)> = packages.into_iter().flat_map(|(_, b)| b).collect();
    let raw = raw(&all);
    let c = Catalog::from_blobs(all).unwrap();
    assert_eq!((c.packages.len(), c.channels.len(), c.bundles.len()), (10, 17, 164));
    assert_eq!((raw.packages, raw.channels, raw.bundles), (10, 17, 164));
    check_heads(&c, &raw);
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for b in &c.bundles {
        assert!(b.csv_metadata().is_none());
        let objects = b.objects().unwrap();
        let csvs: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "ClusterServiceVersion").collect();
        assert_eq!(csvs.len(), 1, "{}", b.name);
        assert_eq!(csvs[0]["metadata"]["name"], b.name.as_str());
        for o in &objects {
            *kinds.entry(o["kind"].as_str().unwrap().to_string()).or_default() += 1;
        }
    }
    assert_eq!(kinds.values().sum::<usize>(), 788);
    assert_eq!((kinds["ClusterServiceVersion"], kinds["CustomResourceDefinition"]), (164, 266));
    walk_every_channel(&c);
    // Display names come from the inline CSV when there is no olm.csv.metadata.
    assert!(c.packages().iter().flat_map(|p| &p.channels).all(|ch| ch.display_name.is_some()));
}

fn registry(rel: &str) -> Catalog {
    let path = testdata(&format!("fbc-operator-registry/{rel}"));
    Catalog::from_blobs(blobs_of(&path, rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn heads(c: &Catalog) -> BTreeMap<(String, String), String> {
    c.channels.iter().map(|ch| ((ch.package.clone(), ch.name.clone()), ch.head().unwrap().name.clone())).collect()
}

#[test]
fn operator_registry_heads_match_its_expected_outputs() {
    let latest = registry("index-declcfgs/latest/index.yaml");
    let exp_latest = registry("index-declcfgs/exp-latest/index.yaml");
    let exp_heads = registry("index-declcfgs/exp-headsonly/index.yaml");
    // exp-latest keeps only each channel's head, so its channels have one entry: ours.
    assert!(exp_latest.channels.iter().all(|ch| ch.entries.len() == 1));
    assert_eq!(heads(&latest), heads(&exp_latest));
    assert_eq!(heads(&latest), heads(&exp_heads));
    let want: BTreeMap<(String, String), String> = [
        ("bar", "alpha", "bar.v1.0.0"),
        ("bar", "stable", "bar.v1.0.0"),
        ("baz", "stable", "baz.v1.1.0"),
        ("foo", "beta", "foo.v0.3.1"),
    ]
    .iter()
    .map(|(p, c, h)| ((p.to_string(), c.to_string()), h.to_string()))
    .collect();
    assert_eq!(heads(&latest), want);
    for rel in [
        "index-declcfgs/old/index.yaml",
        "index-declcfgs/exp-include-channel/index.yaml",
        "index-declcfgs/exp-include-pkg/index.yaml",
        "list-index/foo/index.yaml",
        "list-index/bar/index.yaml",
    ] {
        registry(rel);
    }

    // Upgrades in latest's foo/beta: v0.3.1 replaces v0.2.0 and skips v0.3.0.
    let up = |from: &str, version: &str| {
        let v = Version::parse(version).unwrap();
        latest.upgrade_target("foo", None, from, Some(&v)).unwrap().map(|b| b.name.clone())
    };
    let order: Vec<&str> =
        latest.channel("foo", "beta").unwrap().order().unwrap().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(order, ["foo.v0.3.1", "foo.v0.2.0", "foo.v0.1.0"]);
    assert_eq!(up("foo.v0.3.0", "0.3.0").as_deref(), Some("foo.v0.3.1"));
    assert_eq!(up("foo.v0.2.0", "0.2.0").as_deref(), Some("foo.v0.3.1"));
    assert_eq!(up("foo.v0.1.0", "0.1.0").as_deref(), Some("foo.v0.2.0"));
    assert_eq!(up("foo.v0.1.1", "0.1.1").as_deref(), Some("foo.v0.2.0"));
    // v0.2.0's skipRange (<0.2.0) holds 0.0.1 too, and v0.2.0 is nearer the head than v0.1.0.
    assert_eq!(up("foo.v0.0.1", "0.0.1").as_deref(), Some("foo.v0.2.0"));
    assert_eq!(up("foo.v0.3.1", "0.3.1"), None);
    // bar: installing with no channel takes the default (stable); alpha's tail is skipped.
    assert_eq!(latest.install_target("bar", None, None).unwrap().name, "bar.v1.0.0");
    let alpha: Vec<&str> =
        latest.channel("bar", "alpha").unwrap().order().unwrap().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(alpha, ["bar.v1.0.0", "bar.v0.2.0"]);
    let v010 = Version::parse("0.1.0").unwrap();
    assert_eq!(
        latest.upgrade_target("bar", Some("alpha"), "bar.v0.1.0", Some(&v010)).unwrap().unwrap().name,
        "bar.v0.2.0"
    );
    // Dependencies are read, ranges as written.
    let foo = latest.bundle("foo", "foo.v0.3.1").unwrap();
    assert_eq!(foo.required_packages()[0].version_range, "<0.2.0");
    assert_eq!(foo.required_gvks()[0].kind, "Bar");
    assert_eq!(foo.provided_gvks().len(), 2);
}

fn e2e(file: &str) -> Catalog {
    let path = testdata(&format!("olm-e2e/{file}"));
    Catalog::from_blobs(blobs_of(&path, file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn olm_e2e_example_operator_upgrades_and_deprecations() {
    let v1 = e2e("subscription/example-operator.v0.1.0.yaml");
    let installed = v1.install_target("test-package", None, None).unwrap();
    assert_eq!(installed.name, "example-operator.v0.1.0");
    assert_eq!(installed.image, "quay.io/olmtest/example-operator-bundle:0.1.0");
    let version = installed.version().unwrap();
    assert_eq!(version, Version::new(1, 0, 0));
    assert_eq!(v1.upgrade_target("test-package", None, &installed.name, Some(&version)).unwrap(), None);

    // The catalog is replaced by one holding only v0.2.0, which replaces the installed v0.1.0.
    let v2 = e2e("subscription/example-operator.v0.2.0.yaml");
    let next = v2.upgrade_target("test-package", Some("stable"), "example-operator.v0.1.0", Some(&version)).unwrap();
    assert_eq!(next.unwrap().name, "example-operator.v0.2.0");
    let v3 = e2e("subscription/example-operator.v0.3.0.yaml");
    let v020 = Version::new(1, 0, 1);
    let next = v3.upgrade_target("test-package", None, "example-operator.v0.2.0", Some(&v020)).unwrap();
    // v0.3.0's version (0.3.0) is below v0.2.0's (1.0.1): replaces decides, not versions.
    assert_eq!(next.unwrap().version(), Some(Version::new(0, 3, 0)));
    // From v0.1.0 the v0.3.0 catalog offers nothing: it replaces only v0.2.0.
    assert_eq!(v3.upgrade_target("test-package", None, "example-operator.v0.1.0", Some(&version)).unwrap(), None);
    assert!(v3.deprecation_of("test-package", "stable", "example-operator.v0.3.0").is_empty());

    let d2 = e2e("subscription/example-operator.v0.2.0-deprecations.yaml");
    let messages = |c: &Catalog, bundle: &str| -> Vec<(String, String)> {
        c.deprecation_of("test-package", "stable", bundle)
            .iter()
            .map(|e| (e.reference.schema.clone(), e.message.clone()))
            .collect()
    };
    let package =
        ("olm.package".to_string(), "test-package has been deprecated. Please switch to another-package.".to_string());
    let channel = (
        "olm.channel".to_string(),
        "channel \"stable\" has been deprecated. Please switch to a different one.".to_string(),
    );
    let bundle = (
        "olm.bundle".to_string(),
        "bundle \"example-operator.v0.2.0\" has been deprecated. Please switch to a different one.".to_string(),
    );
    assert_eq!(messages(&d2, "example-operator.v0.2.0"), [package.clone(), channel.clone(), bundle]);
    let d3 = e2e("subscription/example-operator.v0.3.0-deprecations.yaml");
    assert_eq!(messages(&d3, "example-operator.v0.3.0"), [package.clone(), channel]);
    // A subscription with no channel gets no channel deprecation.
    let no_channel: Vec<&str> =
        d3.deprecation_of("test-package", "", "example-operator.v0.3.0").iter().map(|e| e.message.as_str()).collect();
    assert_eq!(no_channel, [package.1.as_str()]);

    // The "invalid" e2e catalogs are valid catalogs: what fails in OLM's e2e is the bundle image
    // (a broken CSV, a tag that does not exist), found only when the bundle is unpacked. Here
    // the chosen bundle says which image, and that it carries no manifests inline.
    for (file, image) in [
        (
            "subscription/example-operator.v0.2.0-invalid-csv.yaml",
            "quay.io/olmtest/example-operator-bundle:0.2.0-invalid-csv",
        ),
        (
            "subscription/example-operator.v0.2.0-non-existent-tag.yaml",
            "quay.io/olmtest/example-operator-bundle:non-existent-tag",
        ),
    ] {
        let c = e2e(file);
        let b = c.upgrade_target("test-package", None, "example-operator.v0.1.0", Some(&version)).unwrap().unwrap();
        assert_eq!((b.name.as_str(), b.image.as_str()), ("example-operator.v0.2.0", image));
        assert_eq!(b.objects().unwrap(), Vec::<Value>::new());
    }

    // magiccatalog: busybox v1.0.0 then v2.0.0 (same semver version, so only replaces moves it).
    let initial = e2e("magiccatalog/fbc_initial.yaml");
    let first = initial.install_target("test-package", None, None).unwrap();
    assert_eq!(first.name, "busybox.v1.0.0");
    let updated = e2e("magiccatalog/fbc_updated.yaml");
    let v = first.version().unwrap();
    let next = updated.upgrade_target("test-package", None, "busybox.v1.0.0", Some(&v)).unwrap().unwrap();
    assert_eq!((next.name.as_str(), next.version()), ("busybox.v2.0.0", Some(v)));
    let json = e2e("magiccatalog/fbc_catalog.json");
    assert_eq!(json.install_target("test-package", Some("stable"), None).unwrap().image, "test-package:v1.0.0");
}

/// A small valid catalog as blobs, to break one thing at a time.
fn base() -> Vec<Value> {
    let bundle = |name: &str, version: &str| {
        json!({"schema": "olm.bundle", "name": name, "package": "p", "image": format!("quay.io/ns/p-bundle:{version}"),
               "properties": [{"type": "olm.package", "value": {"packageName": "p", "version": version}}]})
    };
    vec![
        json!({"schema": "olm.package", "name": "p", "defaultChannel": "stable"}),
        json!({"schema": "olm.channel", "package": "p", "name": "stable", "entries": [
            {"name": "p.v1.0.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"}, {"name": "p.v1.2.0", "replaces": "p.v1.1.0"}]}),
        bundle("p.v1.0.0", "1.0.0"),
        bundle("p.v1.1.0", "1.1.0"),
        bundle("p.v1.2.0", "1.2.0"),
    ]
}

fn check(blobs: Vec<Value>) -> Result<Catalog, Vec<String>> {
    Catalog::from_blobs(blobs.into_iter().enumerate().map(|(i, b)| (format!("c.yaml#{}", i + 1), b)))
        .map_err(|e| e.0.iter().map(ToString::to_string).collect())
}

fn entries(blobs: &mut [Value], entries: Value) {
    blobs[1]["entries"] = entries;
}

#[test]
fn hostile_catalogs_name_every_problem() {
    assert!(check(base()).is_ok());

    // A blob without a schema, and one with a name that is not a string: reading stops there.
    let mut b = base();
    b.push(json!({"name": "stray"}));
    b.push(json!({"schema": "olm.bundle", "name": ["x"], "package": "p"}));
    assert_eq!(
        check(b).unwrap_err(),
        [
            "c.yaml#6: object '{\"name\":\"stray\"}' is missing root schema field",
            "c.yaml#7: expected value for key \"name\" to be a string, got a list",
        ]
    );

    // Two olm.package properties.
    let mut b = base();
    b[2]["properties"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "olm.package", "value": {"packageName": "p", "version": "1.0.1"}}));
    assert_eq!(
        check(b).unwrap_err(),
        ["package \"p\" bundle \"p.v1.0.0\" must have exactly 1 \"olm.package\" property, found 2"]
    );

    // A cycle behind the head.
    let mut b = base();
    entries(
        &mut b,
        json!([{"name": "p.v1.0.0", "replaces": "p.v1.1.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"},
                           {"name": "p.v1.2.0", "replaces": "p.v1.1.0"}]),
    );
    assert_eq!(
        check(b).unwrap_err(),
        ["invalid package \"p\": invalid channel \"stable\": detected cycle in replaces chain of upgrade graph: \
          p.v1.1.0 -> p.v1.0.0 -> p.v1.1.0"]
    );

    // Two heads, and no head.
    let mut b = base();
    entries(&mut b, json!([{"name": "p.v1.0.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"}, {"name": "p.v1.2.0"}]));
    assert_eq!(
        check(b).unwrap_err(),
        ["invalid package \"p\": invalid channel \"stable\": multiple channel heads found in graph: p.v1.1.0, p.v1.2.0"]
    );
    let mut b = base();
    entries(
        &mut b,
        json!([{"name": "p.v1.0.0", "replaces": "p.v1.2.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"},
                           {"name": "p.v1.2.0", "replaces": "p.v1.1.0"}]),
    );
    assert_eq!(
        check(b).unwrap_err(),
        ["invalid package \"p\": invalid channel \"stable\": no channel head found in graph"]
    );

    // Stranded: the head skips v1.1.0, whose replaces edge was the only way to v1.0.0.
    let mut b = base();
    entries(
        &mut b,
        json!([{"name": "p.v1.0.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"},
                           {"name": "p.v1.2.0", "replaces": "p.v1.1.0", "skips": ["p.v1.1.0"]}]),
    );
    assert_eq!(
        check(b).unwrap_err(),
        ["invalid package \"p\": invalid channel \"stable\": channel contains one or more stranded bundles: p.v1.0.0"]
    );
    // A missing bundle is allowed at the tail only: in the middle, what follows is stranded.
    let mut b = base();
    entries(
        &mut b,
        json!([{"name": "p.v1.0.0", "replaces": "p.v0.9.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"},
                           {"name": "p.v1.2.0", "replaces": "p.v1.1.0"}]),
    );
    assert!(check(b).is_ok());
    let mut b = base();
    entries(
        &mut b,
        json!([{"name": "p.v1.0.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"},
                           {"name": "p.v1.2.0", "replaces": "p.v1.1.5", "skips": ["p.v1.1.0"]}]),
    );
    assert_eq!(
        check(b).unwrap_err(),
        ["invalid package \"p\": invalid channel \"stable\": channel contains one or more stranded bundles: p.v1.0.0"]
    );

    // A bad skipRange and an empty skip, under their channel and bundle.
    let mut b = base();
    entries(
        &mut b,
        json!([{"name": "p.v1.0.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0", "skips": [""]},
                           {"name": "p.v1.2.0", "replaces": "p.v1.1.0", "skipRange": "~1.1.0"}]),
    );
    assert_eq!(
        check(b).unwrap_err(),
        [
            "invalid package \"p\": invalid channel \"stable\": invalid bundle \"p.v1.1.0\": skip[0] is empty",
            "invalid package \"p\": invalid channel \"stable\": invalid bundle \"p.v1.2.0\": invalid skipRange \
             \"~1.1.0\": Could not parse Range \"~1.1.0\": Could not parse comparator \"~\" in \"~1.1.0\"",
        ]
    );
}

#[test]
fn hostile_catalogs_model_problems_all_listed() {
    let mut b = base();
    b.push(json!({"schema": "olm.package", "name": "p", "defaultChannel": "stable"}));
    b.push(json!({"schema": "olm.package", "name": "Bad_Name", "defaultChannel": "x"}));
    b.push(json!({"schema": "olm.package", "name": "", "defaultChannel": "x"}));
    b.push(json!({"schema": "olm.channel", "package": "q", "name": "stable", "entries": []}));
    b.push(json!({"schema": "olm.channel", "package": "p", "name": "stable", "entries": []}));
    b.push(json!({"schema": "olm.channel", "package": "p", "name": "fast", "entries": [
        {"name": "p.v1.2.0"}, {"name": "p.v1.2.0"}, {"name": "p.v2.0.0", "replaces": "p.v1.2.0"}]}));
    b.push(json!({"schema": "olm.bundle", "name": "q.v1", "package": "q", "properties": []}));
    b.push(json!({"schema": "olm.bundle", "name": "p.v1.0.0", "package": "p", "properties": []}));
    b.push(json!({"schema": "olm.bundle", "name": "p.v0.1.0", "package": "p", "image": "quay.io/NS/p:1",
        "properties": [{"type": "olm.package", "value": {"packageName": "other", "version": "1.0"}}]}));
    b.push(json!({"schema": "olm.bundle", "name": "p.v1.0.0-again", "package": "p", "image": "quay.io/ns/p:1",
        "properties": [{"type": "olm.package", "value": {"packageName": "p", "version": "1.0.0"}}, {"type": "olm.gvk", "value": "x"}]}));
    b.push(json!({"schema": "olm.deprecations", "package": "p", "entries": [
        {"reference": {"schema": "olm.bundle", "name": "p.v9"}, "message": "gone"},
        {"reference": {"schema": "olm.channel", "name": "nightly"}, "message": "gone"},
        {"reference": {"schema": "olm.package", "name": "p"}, "message": "gone"},
        {"reference": {"schema": "olm.thing"}, "message": "gone"},
        {"reference": {"schema": ""}, "message": "gone"},
        {"reference": {"schema": "olm.channel", "name": "stable"}, "message": ""},
        {"reference": {"schema": "olm.channel", "name": "stable"}, "message": "again"},
    ]}));
    b.push(json!({"schema": "olm.deprecations", "package": "p", "entries": []}));
    b.push(json!({"schema": "olm.deprecations", "package": "zzz", "entries": []}));
    b.push(json!({"schema": "olm.some.future.schema", "whatever": 1}));
    let errors = check(b).unwrap_err();
    let want = [
        "duplicate package \"p\"",
        "invalid package name \"Bad_Name\": [a lowercase RFC 1123 label must consist of lower case alphanumeric \
         characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
         regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')]",
        "config contains package with no name",
        "unknown package \"q\" for channel \"stable\"",
        "package \"p\" has duplicate channel \"stable\"",
        "invalid package \"p\", channel \"fast\": duplicate entry \"p.v1.2.0\"",
        "unknown package \"q\" for bundle \"q.v1\"",
        "package \"p\" has duplicate bundle \"p.v1.0.0\"",
        "package \"p\" does not match \"olm.package\" property \"other\"",
        "package \"p\" bundle \"p.v0.1.0\" image: invalid image pull spec \"quay.io/NS/p:1\": invalid reference \
         format: repository name (NS/p) must be lowercase",
        "error parsing bundle \"p.v0.1.0\" version \"1.0\": No Major.Minor.Patch elements found",
        "package \"p\", bundle \"p.v0.1.0\" not found in any channel entries",
        "parse properties for bundle \"p.v1.0.0-again\": parse property[1] of type \"olm.gvk\": invalid type: \
         string \"x\", expected an object",
        "package \"p\", bundle \"p.v1.0.0-again\" not found in any channel entries",
        "no olm.bundle blobs found in package \"p\" for olm.channel entries [p.v2.0.0]",
        "cannot deprecate bundle \"p.v9\" for package \"p\": bundle not found",
        "cannot deprecate channel \"nightly\" for package \"p\": channel not found",
        "package name must be empty for deprecated package \"p\" (specified \"p\")",
        "cannot deprecate object declcfg.PackageScopedReference{Schema:\"olm.thing\", Name:\"\"} referenced by \
         entry 3 for package \"p\": object schema unknown",
        "schema must be set for deprecation entry [4] for package \"p\"",
        "duplicate deprecation entry declcfg.PackageScopedReference{Schema:\"olm.channel\", Name:\"stable\"} for \
         package \"p\"",
        "expected a maximum of one deprecation per package: \"p\"",
        "cannot apply deprecations to an unknown package \"zzz\"",
        "invalid package \"Bad_Name\": invalid channel \"x\": channel must contain at least one bundle",
        "invalid package \"p\": invalid channel \"stable\": invalid deprecation: message must be set",
    ];
    assert_eq!(errors, want);
}

#[test]
fn hostile_catalogs_package_level_problems() {
    // No default channel, no channels, a bundle in no channel.
    let b = vec![
        json!({"schema": "olm.package", "name": "p"}),
        json!({"schema": "olm.bundle", "name": "p.v1", "package": "p", "image": "quay.io/ns/p:1",
               "properties": [{"type": "olm.package", "value": {"packageName": "p", "version": "1.0.0"}}]}),
    ];
    assert_eq!(
        check(b).unwrap_err(),
        [
            "package \"p\", bundle \"p.v1\" not found in any channel entries",
            "invalid package \"p\": default channel must be set",
            "invalid package \"p\": package must contain at least one channel",
        ]
    );
    // The default channel names no channel: opm makes it an empty channel, and says so.
    let mut b = base();
    b[0]["defaultChannel"] = json!("fast");
    assert_eq!(
        check(b).unwrap_err(),
        ["invalid package \"p\": invalid channel \"fast\": channel must contain at least one bundle"]
    );
    // Two bundles with one version; a bundle with neither image nor manifests.
    let mut b = base();
    b[3]["properties"][0]["value"]["version"] = json!("1.0.0");
    b[4]["image"] = json!("");
    assert_eq!(
        check(b).unwrap_err(),
        [
            "invalid package \"p\": invalid channel \"stable\": invalid bundle \"p.v1.2.0\": bundle image must be set",
            "invalid package \"p\": duplicate versions found in bundles: [{1.0.0: [p.v1.0.0, p.v1.1.0]}]",
        ]
    );
    // An olm.bundle.object stands in for the image.
    let mut b = base();
    b[4]["image"] = json!("");
    b[4]["properties"].as_array_mut().unwrap().push(json!({"type": "olm.bundle.object", "value": {"data": "e30="}}));
    assert!(check(b).is_ok());
    // A release: the name must be opm's normalized one.
    let mut b = base();
    b[4]["properties"][0]["value"]["release"] = json!("2");
    b[4]["properties"][0]["value"]["version"] = json!("1.2.0+b1");
    assert_eq!(
        check(b).unwrap_err(),
        [
            "invalid package \"p\": invalid channel \"stable\": invalid bundle \"p.v1.2.0\": name \"p.v1.2.0\" does \
             not match normalized name \"p-v1.2.0+b1-2\"",
            "invalid package \"p\": invalid channel \"stable\": invalid bundle \"p.v1.2.0\": cannot use build \
             metadata in version with a release version",
        ]
    );
    // A huge name comes back readable.
    let mut b = base();
    b[0]["name"] = json!("x".repeat(5000));
    let e = check(b).unwrap_err();
    assert!(e.iter().all(|line| line.len() < 1000), "{e:?}");
}

#[test]
fn errors_keep_their_parts() {
    let mut b = base();
    entries(
        &mut b,
        json!([{"name": "p.v1.0.0"}, {"name": "p.v1.1.0", "replaces": "p.v1.0.0"},
                           {"name": "p.v1.2.0", "replaces": "p.v1.1.0", "skipRange": ">=x"}]),
    );
    let err = Catalog::from_blobs(b.into_iter().map(|v| ("s".to_string(), v))).unwrap_err();
    match &err.0[..] {
        [CatalogError::Invalid { package, channel, bundle, message }] => {
            assert_eq!(
                (package.as_str(), channel.as_deref(), bundle.as_deref()),
                ("p", Some("stable"), Some("p.v1.2.0"))
            );
            assert_eq!(message, "invalid skipRange \">=x\": Could not get version from string: \">=x\"");
            assert_eq!(err.0[0].message(), message);
        }
        other => panic!("{other:?}"),
    }
    // Shown one per line.
    let two = CatalogErrors(vec![
        CatalogError::Blob { blob: "a#1".into(), message: "m1".into() },
        CatalogError::Model { package: "p".into(), channel: None, bundle: None, message: "m2".into() },
    ]);
    assert_eq!(two.to_string(), "a#1: m1\nm2");
    // decode alone accepts a catalog whose graph is wrong.
    let mut b = base();
    entries(&mut b, json!([{"name": "p.v1.0.0"}, {"name": "p.v1.2.0"}]));
    let decoded = Catalog::decode(b.into_iter().map(|v| ("s".to_string(), v))).unwrap();
    assert!(decoded.validate().is_err());
    let names: BTreeSet<&str> = decoded.bundles.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names.len(), 3);
}

#[test]
fn blob_errors_name_the_field() {
    let mut b = base();
    b[1]["entries"][2]["replaces"] = json!(7);
    b[0]["icon"] = json!("x");
    b[2]["relatedImages"] = json!([{"name": "a", "image": 5}]);
    b.push(json!({"schema": "olm.deprecations", "package": "p", "entries": [{"reference": "x"}]}));
    assert_eq!(
        check(b).unwrap_err(),
        [
            "c.yaml#1: parse package: icon: invalid type: string \"x\", expected an object",
            "c.yaml#2: parse channel: entries[2].replaces: invalid type: integer `7`, expected a string",
            "c.yaml#3: parse bundle: relatedImages[0].image: invalid type: integer `5`, expected a string",
            "c.yaml#6: parse deprecation: entries[0].reference: invalid type: string \"x\", expected an object",
        ]
    );
}
