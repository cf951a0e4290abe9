//! `opm validate`'s checks: how opm builds its model from the blobs (declcfg's ConvertToModel)
//! and what it then requires of the model (model.Validate).
//!
//! opm stops at the first problem of the first stage; here every problem is listed, so a
//! catalog author (or a CatalogSource's status) sees them all at once. Each message is opm's,
//! so it can be searched for in opm's output and code; where one problem would hide others
//! that depend on it (a bundle whose version cannot be read has no version to compare), only
//! the first is reported.

use super::model::*;
use super::range::{go_quote as q, parse_version, prerelease_identifier, Range};
use super::{CatalogError, CatalogErrors};
use semver::Version;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Why a channel has no single head: OLM can only order a channel (and so pick what to install)
/// from exactly one entry that nothing replaces or skips.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("no channel head found in graph")]
    NoHead,
    #[error("multiple channel heads found in graph: {}", .0.join(", "))]
    MultipleHeads(Vec<String>),
}

/// opm's channel head: the one entry no other entry of the channel replaces or skips
/// (skipRange makes no edge here).
pub(crate) fn head_of<'a>(entries: &BTreeMap<&'a str, &'a ChannelEntry>) -> Result<&'a ChannelEntry, HeadError> {
    let mut incoming: HashSet<&str> = HashSet::new();
    for e in entries.values() {
        if !e.replaces.is_empty() {
            incoming.insert(&e.replaces);
        }
        incoming.extend(e.skips.iter().map(String::as_str));
    }
    let heads: Vec<&ChannelEntry> = entries.values().copied().filter(|e| !incoming.contains(e.name.as_str())).collect();
    match heads[..] {
        [] => Err(HeadError::NoHead),
        [head] => Ok(head),
        _ => Err(HeadError::MultipleHeads(heads.iter().map(|e| crate::json_words::shown(&e.name)).collect())),
    }
}

/// opm's `validateReplacesChain`: from the head, follow `replaces` (stopping at an entry some
/// entry skips, or at one the channel lacks, which is how the tail may replace a bundle that is
/// gone); a name met twice is a cycle; an entry neither on that chain nor skipped is stranded.
fn replaces_chain(entries: &BTreeMap<&str, &ChannelEntry>) -> Result<(), String> {
    let head = head_of(entries).map_err(|e| e.to_string())?;
    let skipped: HashSet<&str> = entries.values().flat_map(|e| e.skips.iter().map(String::as_str)).collect();
    // The names in the order met (each entry's `replaces` after it); opm reports a cycle as
    // the path from the repeated name's first visit.
    let mut path: Vec<&str> = vec![&head.name];
    let mut first_at: HashMap<&str, usize> = HashMap::new();
    let mut on_chain: HashSet<&str> = HashSet::from([head.name.as_str()]);
    let mut cur = Some(head);
    while let Some(c) = cur {
        first_at.entry(&c.name).or_insert(path.len() - 1);
        if skipped.contains(c.replaces.as_str()) {
            break;
        }
        path.push(&c.replaces);
        if on_chain.contains(c.replaces.as_str()) {
            let from = first_at.get(c.replaces.as_str()).copied().unwrap_or(path.len() - 1);
            let shown: Vec<String> = path[from..].iter().map(|n| crate::json_words::shown(n)).collect();
            return Err(format!("detected cycle in replaces chain of upgrade graph: {}", shown.join(" -> ")));
        }
        on_chain.insert(&c.replaces);
        cur = entries.get(c.replaces.as_str()).copied();
    }
    let stranded: Vec<String> = entries
        .keys()
        .filter(|n| !on_chain.contains(*n) && !skipped.contains(*n))
        .map(|n| crate::json_words::shown(n))
        .collect();
    if stranded.is_empty() {
        Ok(())
    } else {
        Err(format!("channel contains one or more stranded bundles: {}", stranded.join(", ")))
    }
}

struct PackageModel<'a> {
    package: &'a Package,
    channels: BTreeMap<&'a str, ChannelModel<'a>>,
    bundles: BTreeMap<&'a str, BundleModel<'a>>,
    deprecation: Option<&'a str>,
}

#[derive(Default)]
struct ChannelModel<'a> {
    entries: BTreeMap<&'a str, &'a ChannelEntry>,
    deprecation: Option<&'a str>,
}

struct BundleModel<'a> {
    bundle: &'a Bundle,
    /// `None` when the version could not be read (already reported).
    version: Option<Version>,
    release: String,
    deprecation: Option<&'a str>,
}

impl Catalog {
    /// `opm validate` on the catalog, every problem listed. Messages are opm's; the order is
    /// the blobs' for problems of reading them together, then by package, channel and bundle
    /// name for problems of the graph (opm's own order there is Go's random map order).
    pub fn validate(&self) -> Result<(), CatalogErrors> {
        let mut v = Validation { errors: Vec::new() };
        let mut packages = v.packages(self);
        v.channels(self, &mut packages);
        v.bundles(self, &mut packages);
        v.entries_without_bundles(self, &packages);
        // opm gives a package whose default channel has no blob an empty channel of that name,
        // which its model check then reports as "channel must contain at least one bundle".
        for pm in packages.values_mut() {
            let default = pm.package.default_channel.as_str();
            if !default.is_empty() {
                pm.channels.entry(default).or_default();
            }
        }
        v.deprecations(self, &mut packages);
        for (name, pm) in &packages {
            v.package(name, pm);
        }
        if v.errors.is_empty() {
            Ok(())
        } else {
            Err(CatalogErrors(v.errors))
        }
    }
}

struct Validation {
    errors: Vec<CatalogError>,
}

impl Validation {
    fn model(&mut self, package: &str, channel: Option<&str>, bundle: Option<&str>, message: String) {
        let cut = |s: &str| crate::json_words::shown(s);
        self.errors.push(CatalogError::Model {
            package: cut(package),
            channel: channel.map(cut),
            bundle: bundle.map(cut),
            message,
        });
    }

    fn invalid(&mut self, package: &str, channel: Option<&str>, bundle: Option<&str>, message: String) {
        let cut = |s: &str| crate::json_words::shown(s);
        self.errors.push(CatalogError::Invalid {
            package: cut(package),
            channel: channel.map(cut),
            bundle: bundle.map(cut),
            message,
        });
    }

    fn packages<'a>(&mut self, catalog: &'a Catalog) -> BTreeMap<&'a str, PackageModel<'a>> {
        let mut packages = BTreeMap::new();
        for p in &catalog.packages {
            let name = p.name.as_str();
            if name.is_empty() {
                self.model("", None, None, "config contains package with no name".into());
                continue;
            }
            if packages.contains_key(name) {
                self.model(name, None, None, format!("duplicate package {}", q(name)));
                continue;
            }
            let label = dns1123_label(name);
            if !label.is_empty() {
                self.model(name, None, None, format!("invalid package name {}: [{}]", q(name), label.join(" ")));
            }
            packages.insert(
                name,
                PackageModel { package: p, channels: BTreeMap::new(), bundles: BTreeMap::new(), deprecation: None },
            );
        }
        packages
    }

    fn channels<'a>(&mut self, catalog: &'a Catalog, packages: &mut BTreeMap<&'a str, PackageModel<'a>>) {
        for c in &catalog.channels {
            let (pkg, name) = (c.package.as_str(), c.name.as_str());
            let Some(pm) = packages.get_mut(pkg) else {
                self.model(pkg, Some(name), None, format!("unknown package {} for channel {}", q(pkg), q(name)));
                continue;
            };
            if name.is_empty() {
                self.model(pkg, Some(name), None, format!("package {} contains channel with no name", q(pkg)));
                continue;
            }
            if pm.channels.contains_key(name) {
                self.model(pkg, Some(name), None, format!("package {} has duplicate channel {}", q(pkg), q(name)));
                continue;
            }
            let mut entries = BTreeMap::new();
            for e in &c.entries {
                if entries.contains_key(e.name.as_str()) {
                    let message =
                        format!("invalid package {}, channel {}: duplicate entry {}", q(pkg), q(name), q(&e.name));
                    self.model(pkg, Some(name), Some(&e.name), message);
                    continue;
                }
                entries.insert(e.name.as_str(), e);
            }
            pm.channels.insert(name, ChannelModel { entries, deprecation: None });
        }
    }

    fn bundles<'a>(&mut self, catalog: &'a Catalog, packages: &mut BTreeMap<&'a str, PackageModel<'a>>) {
        for b in &catalog.bundles {
            let (pkg, name) = (b.package.as_str(), b.name.as_str());
            if pkg.is_empty() {
                self.model(pkg, None, Some(name), format!("package name must be set for bundle {}", q(name)));
                continue;
            }
            let Some(pm) = packages.get_mut(pkg) else {
                self.model(pkg, None, Some(name), format!("unknown package {} for bundle {}", q(pkg), q(name)));
                continue;
            };
            if pm.bundles.contains_key(name) {
                self.model(pkg, None, Some(name), format!("package {} has duplicate bundle {}", q(pkg), q(name)));
                continue;
            }
            let mut bm = BundleModel { bundle: b, version: None, release: String::new(), deprecation: None };
            let mut readable = true;
            for (i, p) in b.properties.iter().enumerate() {
                if let Err(e) = check_property(p) {
                    readable = false;
                    let message = format!(
                        "parse properties for bundle {}: parse property[{i}] of type {}: {e}",
                        q(name),
                        q(&p.type_)
                    );
                    self.model(pkg, None, Some(name), message);
                }
            }
            let found: Vec<&Property> = b.properties_of(PROPERTY_PACKAGE).collect();
            let property = match (readable, &found[..]) {
                (false, _) => None,
                (true, [_]) => b.package_property().ok(),
                (true, _) => {
                    let message = format!(
                        "package {} bundle {} must have exactly 1 {} property, found {}",
                        q(pkg),
                        q(name),
                        q(PROPERTY_PACKAGE),
                        found.len()
                    );
                    self.model(pkg, None, Some(name), message);
                    None
                }
            };
            if let Some(p) = &property {
                if p.package_name != pkg {
                    let message = format!(
                        "package {} does not match {} property {}",
                        q(pkg),
                        q(PROPERTY_PACKAGE),
                        q(&p.package_name)
                    );
                    self.model(pkg, None, Some(name), message);
                }
            }
            if let Err(e) = image_reference(&b.image) {
                let message = format!(
                    "package {} bundle {} image: invalid image pull spec {}: {e}",
                    q(pkg),
                    q(name),
                    q(&b.image)
                );
                self.model(pkg, None, Some(name), message);
            }
            for (i, rel) in b.related_images.iter().enumerate() {
                if let Err(e) = image_reference(&rel.image) {
                    let message = format!(
                        "package {} bundle {} relatedImages[{i}].image: invalid image pull spec {}: {e}",
                        q(pkg),
                        q(name),
                        q(&rel.image)
                    );
                    self.model(pkg, None, Some(name), message);
                }
            }
            if let Some(p) = property {
                match parse_version(&p.version) {
                    Ok(v) => bm.version = Some(v),
                    Err(e) => {
                        let message = format!("error parsing bundle {} version {}: {e}", q(name), q(&p.version));
                        self.model(pkg, None, Some(name), message);
                    }
                }
                if let Err(e) = release(&p.release) {
                    let message = format!("error parsing bundle {} release version {}: {e}", q(name), q(&p.release));
                    self.model(pkg, None, Some(name), message);
                    bm.version = None;
                }
                bm.release = p.release;
            }
            if !pm.channels.values().any(|c| c.entries.contains_key(name)) {
                let message = format!("package {}, bundle {} not found in any channel entries", q(pkg), q(name));
                self.model(pkg, None, Some(name), message);
            }
            pm.bundles.insert(name, bm);
        }
    }

    fn entries_without_bundles(&mut self, catalog: &Catalog, packages: &BTreeMap<&str, PackageModel<'_>>) {
        // In the order packages were read, as opm would meet them.
        for p in &catalog.packages {
            let Some(pm) = packages.get(p.name.as_str()).filter(|pm| std::ptr::eq(pm.package, p)) else { continue };
            let missing: BTreeSet<&str> = pm
                .channels
                .values()
                .flat_map(|c| c.entries.keys().copied())
                .filter(|e| !pm.bundles.contains_key(e))
                .collect();
            if !missing.is_empty() {
                let names: Vec<String> = missing.iter().map(|n| crate::json_words::shown(n)).collect();
                let message = format!(
                    "no olm.bundle blobs found in package {} for olm.channel entries [{}]",
                    q(&p.name),
                    names.join(" ")
                );
                self.model(&p.name, None, None, message);
            }
        }
    }

    fn deprecations<'a>(&mut self, catalog: &'a Catalog, packages: &mut BTreeMap<&'a str, PackageModel<'a>>) {
        let mut seen: HashSet<&str> = HashSet::new();
        for (i, d) in catalog.deprecations.iter().enumerate() {
            let pkg = d.package.as_str();
            if pkg.is_empty() {
                self.model(pkg, None, None, format!("package name must be set for deprecation item {i}"));
                continue;
            }
            let Some(pm) = packages.get_mut(pkg) else {
                self.model(pkg, None, None, format!("cannot apply deprecations to an unknown package {}", q(pkg)));
                continue;
            };
            if !seen.insert(pkg) {
                self.model(pkg, None, None, format!("expected a maximum of one deprecation per package: {}", q(pkg)));
                continue;
            }
            let mut references: HashSet<(&str, &str)> = HashSet::new();
            for (j, e) in d.entries.iter().enumerate() {
                let (schema, name) = (e.reference.schema.as_str(), e.reference.name.as_str());
                if schema.is_empty() {
                    self.model(
                        pkg,
                        None,
                        None,
                        format!("schema must be set for deprecation entry [{j}] for package {}", q(pkg)),
                    );
                    continue;
                }
                if !references.insert((schema, name)) {
                    let message =
                        format!("duplicate deprecation entry {} for package {}", go_reference(&e.reference), q(pkg));
                    self.model(pkg, None, None, message);
                    continue;
                }
                match schema {
                    SCHEMA_BUNDLE => match pm.bundles.get_mut(name) {
                        Some(bm) => bm.deprecation = Some(&e.message),
                        None => {
                            let message =
                                format!("cannot deprecate bundle {} for package {}: bundle not found", q(name), q(pkg));
                            self.model(pkg, None, Some(name), message);
                        }
                    },
                    SCHEMA_CHANNEL => match pm.channels.get_mut(name) {
                        Some(cm) => cm.deprecation = Some(&e.message),
                        None => {
                            let message = format!(
                                "cannot deprecate channel {} for package {}: channel not found",
                                q(name),
                                q(pkg)
                            );
                            self.model(pkg, Some(name), None, message);
                        }
                    },
                    SCHEMA_PACKAGE if !name.is_empty() => {
                        let message = format!(
                            "package name must be empty for deprecated package {} (specified {})",
                            q(pkg),
                            q(name)
                        );
                        self.model(pkg, None, None, message);
                    }
                    SCHEMA_PACKAGE => pm.deprecation = Some(&e.message),
                    _ => {
                        let message = format!(
                            "cannot deprecate object {} referenced by entry {j} for package {}: object schema unknown",
                            go_reference(&e.reference),
                            q(pkg)
                        );
                        self.model(pkg, None, None, message);
                    }
                }
            }
        }
    }

    /// opm's `Package.Validate` and what it calls, for one package.
    fn package(&mut self, name: &str, pm: &PackageModel<'_>) {
        if pm.package.default_channel.is_empty() {
            self.invalid(name, None, None, "default channel must be set".into());
        }
        if pm.channels.is_empty() {
            self.invalid(name, None, None, "package must contain at least one channel".into());
        }
        for (cname, cm) in &pm.channels {
            let channel = Some(*cname);
            if cm.entries.is_empty() {
                self.invalid(name, channel, None, "channel must contain at least one bundle".into());
            } else if let Err(e) = replaces_chain(&cm.entries) {
                self.invalid(name, channel, None, e);
            }
            for (ename, entry) in &cm.entries {
                if let Some(bm) = pm.bundles.get(ename) {
                    self.bundle(name, cname, entry, bm);
                }
            }
            if cm.deprecation == Some("") {
                self.invalid(name, channel, None, "invalid deprecation: message must be set".into());
            }
        }
        // Versions of the bundles in some channel, with opm's release suffix.
        let mut by_version: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        for (bname, bm) in &pm.bundles {
            let Some(v) = &bm.version else { continue };
            if pm.channels.values().any(|c| c.entries.contains_key(bname)) {
                by_version.entry(version_string(v, &bm.release)).or_default().insert(bname);
            }
        }
        let dups: Vec<String> = by_version
            .iter()
            .filter(|(_, names)| names.len() > 1)
            .map(|(v, names)| {
                let names: Vec<String> = names.iter().map(|n| crate::json_words::shown(n)).collect();
                format!("{{{v}: [{}]}}", names.join(", "))
            })
            .collect();
        if !dups.is_empty() {
            self.invalid(name, None, None, format!("duplicate versions found in bundles: [{}]", dups.join(" ")));
        }
        if pm.deprecation == Some("") {
            self.invalid(name, None, None, "invalid deprecation: message must be set".into());
        }
    }

    /// opm's `Bundle.Validate`, for one bundle as an entry of one channel (so a problem of a
    /// bundle in two channels is reported under each, as opm's tree does).
    fn bundle(&mut self, package: &str, channel: &str, entry: &ChannelEntry, bm: &BundleModel<'_>) {
        let b = bm.bundle;
        let mut report = |message: String| self.invalid(package, Some(channel), Some(&b.name), message);
        if b.name.is_empty() {
            report("name must be set".into());
        }
        if let (Some(v), false) = (&bm.version, bm.release.is_empty()) {
            let normalized = format!("{package}-v{}", version_string(v, &bm.release));
            if b.name != normalized {
                report(format!("name {} does not match normalized name {}", q(&b.name), q(&normalized)));
            }
        }
        for (i, skip) in entry.skips.iter().enumerate() {
            if skip.is_empty() {
                report(format!("skip[{i}] is empty"));
            }
        }
        if !entry.skip_range.is_empty() {
            if let Err(e) = Range::parse(&entry.skip_range) {
                report(format!("invalid skipRange {}: {e}", q(&entry.skip_range)));
            }
        }
        if b.image.is_empty() && b.properties_of(PROPERTY_BUNDLE_OBJECT).next().is_none() {
            report("bundle image must be set".into());
        }
        if bm.deprecation == Some("") {
            report("invalid deprecation: message must be set".into());
        }
        if let (Some(v), false) = (&bm.version, bm.release.is_empty()) {
            if !v.build.is_empty() {
                report("cannot use build metadata in version with a release version".into());
            }
        }
    }
}

/// opm's version string: the version, then `-<release>` when the bundle has one.
fn version_string(v: &Version, release: &str) -> String {
    if release.is_empty() {
        v.to_string()
    } else {
        format!("{v}-{release}")
    }
}

/// opm's `NewRelease`: at most 20 characters, dot-separated pre-release identifiers.
fn release(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Ok(());
    }
    if text.len() > 20 {
        return Err(format!("invalid release {}: exceeds maximum length of 20 characters", q(text)));
    }
    let errs: Vec<String> = text
        .split('.')
        .enumerate()
        .filter_map(|(i, s)| prerelease_identifier(s).err().map(|e| format!("segment {i}: {e}")))
        .collect();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("invalid release {}: {}", q(text), errs.join("; ")))
    }
}

/// Go's `%#v` of a deprecation reference, as opm prints it.
fn go_reference(r: &PackageScopedReference) -> String {
    format!("declcfg.PackageScopedReference{{Schema:{}, Name:{}}}", q(&r.schema), q(&r.name))
}

const DNS1123_LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
     or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
     validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// Kubernetes' `IsDNS1123Label`, which opm requires of package names (they become object
/// names).
fn dns1123_label(s: &str) -> Vec<&'static str> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters");
    }
    if !is_label(s) {
        errs.push(if s.split('.').all(is_label) { "must not contain dots" } else { DNS1123_LABEL_MESSAGE });
    }
    errs
}

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    b.first().is_some_and(alnum) && b.last().is_some_and(alnum) && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// Whether `image` is a pull spec opm accepts (docker/distribution's `ParseNormalizedNamed`);
/// empty is allowed (a bundle may carry its manifests instead). Errors in that library's words.
pub(crate) fn image_reference(image: &str) -> Result<(), String> {
    if image.is_empty() {
        return Ok(());
    }
    if image.len() == 64 && image.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
        return Err(format!("invalid repository name ({image}), cannot specify 64-byte hexadecimal strings"));
    }
    let (domain, remainder) = split_docker_domain(image);
    let remote = remainder.split(':').next().unwrap_or_default();
    if remote.to_lowercase() != remote {
        return Err(format!("invalid reference format: repository name ({remote}) must be lowercase"));
    }
    let full = format!("{domain}/{remainder}");
    let Some((name, digest)) = match_reference(&full) else {
        let lower = full.to_lowercase();
        if lower != full && match_reference(&lower).is_some() {
            return Err("repository name must be lowercase".into());
        }
        return Err("invalid reference format".into());
    };
    let path = match name.split_once('/') {
        Some((d, r)) if is_domain_and_port(d) && is_remote_name(r) => r,
        _ => name,
    };
    if path.len() > 255 {
        return Err("repository name must not be more than 255 characters".into());
    }
    match digest {
        Some(d) => check_digest(d),
        None => Ok(()),
    }
}

fn split_docker_domain(name: &str) -> (&str, String) {
    const DEFAULT: &str = "docker.io";
    let Some((first, rest)) = name.split_once('/') else { return (DEFAULT, format!("library/{name}")) };
    let (domain, remote) = if first == "localhost" || first.contains(['.', ':']) || first.to_lowercase() != first {
        (first, rest)
    } else if first == "index.docker.io" {
        (DEFAULT, rest)
    } else {
        (DEFAULT, name)
    };
    if domain == DEFAULT && !remote.contains('/') {
        (domain, format!("library/{remote}"))
    } else {
        (domain, remote.to_string())
    }
}

/// The reference grammar: `name[:tag][@digest]`; the name and the digest part when it matches.
fn match_reference(s: &str) -> Option<(&str, Option<&str>)> {
    let (rest, digest) = match s.split_once('@') {
        Some((rest, d)) => (rest, Some(d)),
        None => (s, None),
    };
    if digest.is_some_and(|d| !is_digest(d)) {
        return None;
    }
    let (name, tag) = match rest.rfind(':') {
        Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
        _ => (rest, None),
    };
    if tag.is_some_and(|t| !is_tag(t)) {
        return None;
    }
    let named = match name.split_once('/') {
        Some((d, r)) if is_domain_and_port(d) && is_remote_name(r) => true,
        _ => is_remote_name(name),
    };
    named.then_some((name, digest))
}

fn is_tag(t: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    t.len() <= 128 && t.starts_with(word) && t.chars().all(|c| word(c) || c == '.' || c == '-')
}

fn is_remote_name(s: &str) -> bool {
    s.split('/').all(is_path_component)
}

/// `[a-z0-9]+` runs joined by one `.`, one `_`, `__`, or any number of `-`.
fn is_path_component(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = s.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i < b.len() && alnum(b[i]) {
            i += 1;
        }
        if i == start {
            return false;
        }
        if i == b.len() {
            return true;
        }
        let sep = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let separator = &s[sep..i];
        if !(separator == "." || separator == "_" || separator == "__" || separator.bytes().all(|c| c == b'-')) {
            return false;
        }
    }
}

fn is_domain_and_port(s: &str) -> bool {
    let (host, port) = if s.starts_with('[') {
        match s.find(']') {
            Some(end) => (&s[..=end], &s[end + 1..]),
            None => return false,
        }
    } else {
        match s.split_once(':') {
            Some((h, _)) => (h, &s[h.len()..]),
            None => (s, ""),
        }
    };
    let port_ok =
        port.is_empty() || (port.len() > 1 && port.starts_with(':') && port[1..].bytes().all(|c| c.is_ascii_digit()));
    let host_ok = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        !inner.is_empty() && inner.bytes().all(|c| c.is_ascii_hexdigit() || c == b':')
    } else {
        host.split('.').all(|c| {
            let b = c.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
    };
    port_ok && host_ok
}

/// The reference grammar's digest: `algorithm:hex` with at least 32 hex digits.
fn is_digest(d: &str) -> bool {
    let Some((alg, hex)) = d.split_once(':') else { return false };
    let alg_ok = alg.split(['-', '_', '+', '.']).all(|part| {
        part.starts_with(|c: char| c.is_ascii_alphabetic()) && part.chars().all(|c| c.is_ascii_alphanumeric())
    });
    alg_ok && hex.len() >= 32 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

/// go-digest's `Validate` for the algorithms it knows.
fn check_digest(d: &str) -> Result<(), String> {
    let Some((alg, hex)) = d.split_once(':').filter(|(_, hex)| !hex.is_empty()) else {
        return Err("invalid checksum digest format".into());
    };
    let size = match alg {
        "sha256" => 32,
        "sha384" => 48,
        "sha512" => 64,
        _ => return Err("unsupported digest algorithm".into()),
    };
    if hex.len() != size * 2 {
        return Err("invalid checksum digest length".into());
    }
    if !hex.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
        return Err("invalid checksum digest format".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_pull_specs_as_docker_reference_reads_them() {
        let sha = "a".repeat(64);
        for ok in [
            "quay.io/olmtest/example-operator-bundle:0.1.0".to_string(),
            "busybox".into(),
            "busybox:1.36".into(),
            "localhost:5000/a/b:c".into(),
            "registry.example.com:5000/ns/op-bundle@sha256:".to_string() + &sha,
            "quay.io/ns/op:v1.0.0@sha256:".to_string() + &sha,
            "[::1]:5000/x/y".into(),
            "test.registry/foo-operator/foo-bundle:v0.1.0".into(),
            "a__b/c-----d/e.f_g".into(),
            "Example.COM/ns/op:TAG".into(),
        ] {
            assert_eq!(image_reference(&ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("quay.io/NS/op:1", "invalid reference format: repository name (NS/op) must be lowercase"),
            ("Busybox", "invalid reference format: repository name (library/Busybox) must be lowercase"),
            ("quay.io/ns/op:", "invalid reference format"),
            ("quay.io/ns/op:-bad", "invalid reference format"),
            ("quay.io/ns//op", "invalid reference format"),
            ("quay.io/ns/op_", "invalid reference format"),
            ("quay.io/ns/a._b", "invalid reference format"),
            ("quay.io/ns/op@sha256:abc", "invalid reference format"),
            ("quay.io/ns/op with space", "invalid reference format"),
            ("quay.io/ns/op@sha256:0123456789abcdef0123456789abcdef", "invalid checksum digest length"),
            ("quay.io/ns/op@md5:0123456789abcdef0123456789abcdef", "unsupported digest algorithm"),
        ] {
            assert_eq!(image_reference(bad).unwrap_err(), why, "{bad}");
        }
        assert_eq!(
            image_reference(&sha).unwrap_err(),
            format!("invalid repository name ({sha}), cannot specify 64-byte hexadecimal strings")
        );
        let long = format!("quay.io/{}", "a".repeat(256));
        assert_eq!(image_reference(&long).unwrap_err(), "repository name must not be more than 255 characters");
    }

    #[test]
    fn package_names_are_dns_labels() {
        assert!(dns1123_label("etcd-operator").is_empty());
        assert_eq!(dns1123_label("a.b"), ["must not contain dots"]);
        assert_eq!(dns1123_label("Etcd"), [DNS1123_LABEL_MESSAGE]);
        assert_eq!(dns1123_label(&"a".repeat(64)), ["must be no more than 63 characters"]);
        assert_eq!(dns1123_label("-a"), [DNS1123_LABEL_MESSAGE]);
    }

    #[test]
    fn releases() {
        assert_eq!(release(""), Ok(()));
        assert_eq!(release("1.alpha"), Ok(()));
        assert_eq!(
            release("01.a_b"),
            Err("invalid release \"01.a_b\": segment 0: Numeric PreRelease version must not contain leading zeroes \
                 \"01\"; segment 1: Invalid character(s) found in prerelease \"a_b\""
                .into())
        );
        assert_eq!(
            release(&"1".repeat(21)),
            Err(format!("invalid release \"{}\": exceeds maximum length of 20 characters", "1".repeat(21)))
        );
    }
}
