//! The blobs of a file-based catalog as typed values, read as opm reads them.
//!
//! opm decodes blobs with Go's `encoding/json`, which matches field names case-insensitively and
//! reads `null` as "not set"; catalogs written by hand (the FBC templates use `DefaultChannel`)
//! depend on that, so keys are folded to their canonical spelling before decoding and nulls of
//! known fields are dropped. Everything this module does not model stays in `extra` maps and
//! property values are kept whole, so a blob read here loses nothing a newer OLM may need.

use super::range::{go_quote, parse_version};
use super::{CatalogError, CatalogErrors};
use crate::json_words::{in_json_terms, kind_of, shown};
use crate::meta::Extra;
use base64::Engine as _;
use semver::Version;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

pub const SCHEMA_PACKAGE: &str = "olm.package";
pub const SCHEMA_CHANNEL: &str = "olm.channel";
pub const SCHEMA_BUNDLE: &str = "olm.bundle";
pub const SCHEMA_DEPRECATIONS: &str = "olm.deprecations";

/// Bundle property types this module reads; any other type is kept and ignored, as OLM does.
pub const PROPERTY_PACKAGE: &str = "olm.package";
pub const PROPERTY_PACKAGE_REQUIRED: &str = "olm.package.required";
pub const PROPERTY_GVK: &str = "olm.gvk";
pub const PROPERTY_GVK_REQUIRED: &str = "olm.gvk.required";
pub const PROPERTY_BUNDLE_OBJECT: &str = "olm.bundle.object";
pub const PROPERTY_CSV_METADATA: &str = "olm.csv.metadata";
pub const PROPERTY_CHANNEL: &str = "olm.channel";
pub const PROPERTY_CONSTRAINT: &str = "olm.constraint";
pub const PROPERTY_MAX_OPENSHIFT_VERSION: &str = "olm.maxOpenShiftVersion";

/// A whole catalog, blob by blob in the order read. Lists rather than maps: a catalog that
/// fails validation (duplicates included) can still be read and shown as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    pub packages: Vec<Package>,
    pub channels: Vec<Channel>,
    pub bundles: Vec<Bundle>,
    pub deprecations: Vec<Deprecations>,
    /// Blobs of schemas OLM v0 does not read either; kept so a catalog can be served on whole.
    pub others: Vec<OtherBlob>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    pub schema: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub default_channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<Icon>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<Property>,
    #[serde(flatten)]
    pub extra: Extra,
    /// Where the blob came from (`file#n`), for messages a catalog author can act on.
    #[serde(skip)]
    pub source: String,
}

/// Kept as the base64 text it is served as (PackageManifests show it so); checked to decode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Icon {
    #[serde(default, rename = "base64data")]
    pub data: String,
    #[serde(default, rename = "mediatype")]
    pub media_type: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Channel {
    pub schema: String,
    #[serde(default)]
    pub package: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub entries: Vec<ChannelEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<Property>,
    #[serde(flatten)]
    pub extra: Extra,
    #[serde(skip)]
    pub source: String,
}

/// One bundle's place in a channel: its upgrade edges live here, not on the bundle, so the same
/// bundle can be reached differently in different channels.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelEntry {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub replaces: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skips: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub skip_range: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bundle {
    pub schema: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub package: String,
    #[serde(default)]
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<Property>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_images: Vec<RelatedImage>,
    #[serde(flatten)]
    pub extra: Extra,
    #[serde(skip)]
    pub source: String,
}

/// A bundle (or package, or channel) property, kept whole: its value's shape depends on its type
/// and types this module does not know must survive untouched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Property {
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `None` when the key is missing (opm refuses that), `Some(Null)` for an explicit null.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelatedImage {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub image: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A package's `olm.deprecations` blob: what OLM turns into a Subscription's Deprecated
/// conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Deprecations {
    pub schema: String,
    #[serde(default)]
    pub package: String,
    #[serde(default)]
    pub entries: Vec<DeprecationEntry>,
    #[serde(flatten)]
    pub extra: Extra,
    #[serde(skip)]
    pub source: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeprecationEntry {
    #[serde(default)]
    pub reference: PackageScopedReference,
    #[serde(default)]
    pub message: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// What a deprecation is about: the package (no name), one of its channels or one of its bundles.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageScopedReference {
    #[serde(default)]
    pub schema: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A blob of a schema OLM v0 ignores (templates, newer schemas), with the keys opm reads first.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherBlob {
    pub source: String,
    pub schema: String,
    pub package: String,
    pub name: String,
    pub value: Value,
}

/// `olm.package`: the bundle's package and version (and the newer `release`, opm's suffix for
/// rebuilds of one version).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageProperty {
    #[serde(default)]
    pub package_name: String,
    #[serde(default)]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release: String,
}

/// `olm.gvk` (an API the bundle provides) and `olm.gvk.required` (one it needs).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Gvk {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// `olm.package.required`: another package, in a version range (blang syntax, see
/// [`super::Range`]), that must be installed with the bundle.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageRequired {
    #[serde(default)]
    pub package_name: String,
    #[serde(default)]
    pub version_range: String,
}

/// Why a bundle's property could not be read, naming the bundle: these are read on demand (an
/// InstallPlan wants the manifests, a ClusterOperator the max OpenShift version), long after the
/// catalog was checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bundle {}: {message}", go_quote(bundle))]
pub struct PropertyError {
    pub bundle: String,
    pub message: String,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

const PACKAGE_FIELDS: &[&str] = &["schema", "name", "defaultChannel", "icon", "description", "properties"];
const ICON_FIELDS: &[&str] = &["base64data", "mediatype"];
const PROPERTY_FIELDS: &[&str] = &["type", "value"];
const CHANNEL_FIELDS: &[&str] = &["schema", "package", "name", "entries", "properties"];
const ENTRY_FIELDS: &[&str] = &["name", "replaces", "skips", "skipRange"];
const BUNDLE_FIELDS: &[&str] = &["schema", "name", "package", "image", "properties", "relatedImages"];
const RELATED_IMAGE_FIELDS: &[&str] = &["name", "image"];
const DEPRECATIONS_FIELDS: &[&str] = &["schema", "package", "entries"];
const DEPRECATION_ENTRY_FIELDS: &[&str] = &["reference", "message"];
const REFERENCE_FIELDS: &[&str] = &["schema", "name"];

/// Rename keys that match a known field case-insensitively to the field's spelling (an exact
/// match wins), as Go's decoder matches them, and drop known fields that are null (Go leaves
/// the zero value). `keep_null` fields keep an explicit null.
fn fold(map: &mut Map<String, Value>, fields: &[&str], keep_null: &[&str]) {
    for field in fields {
        if !map.contains_key(*field) {
            let found = map.keys().find(|k| k.eq_ignore_ascii_case(field)).cloned();
            if let Some(key) = found {
                if let Some(v) = map.remove(&key) {
                    map.insert((*field).to_string(), v);
                }
            }
        }
        if !keep_null.contains(field) && map.get(*field).is_some_and(Value::is_null) {
            map.remove(*field);
        }
    }
}

/// [`fold`] each object of the list at `key`; a null element is Go's zero value (an empty object).
fn fold_each(map: &mut Map<String, Value>, key: &str, fields: &[&str], keep_null: &[&str]) {
    if let Some(Value::Array(items)) = map.get_mut(key) {
        for item in items {
            if item.is_null() {
                *item = Value::Object(Map::new());
            }
            if let Value::Object(m) = item {
                fold(m, fields, keep_null);
            }
        }
    }
}

fn fold_properties(map: &mut Map<String, Value>) {
    fold_each(map, "properties", PROPERTY_FIELDS, &["value"]);
}

/// The blob as `T`, or opm's `parse <what>: ...` with the field at fault.
fn typed<T: DeserializeOwned>(map: Map<String, Value>, what: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let at = e.path().to_string();
        let why = shown(&in_json_terms(&e.inner().to_string()));
        if at == "." {
            format!("parse {what}: {why}")
        } else {
            format!("parse {what}: {at}: {why}")
        }
    })
}

/// Go's `base64.StdEncoding` as `encoding/json` uses it for `[]byte`: padding required, line
/// breaks skipped, stray low bits of the last symbol allowed.
pub(crate) fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const GO_STD: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
    );
    let cleaned: String = text.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    GO_STD.decode(cleaned.as_bytes()).map_err(|e| {
        let at = match e {
            base64::DecodeError::InvalidByte(at, _) | base64::DecodeError::InvalidLastSymbol(at, _) => at,
            base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => cleaned.len(),
        };
        format!("illegal base64 data at input byte {at}")
    })
}

impl Catalog {
    /// Read blobs already decoded from YAML or JSON streams (`source` names each, e.g.
    /// `pkg/catalog.yaml#3`) and check them as `opm validate` does: every problem found, not
    /// only the first, so one round of fixes can clear them all. A catalog that fails is not
    /// usable, as OLM does not serve one opm refuses.
    pub fn from_blobs(blobs: impl IntoIterator<Item = (String, Value)>) -> Result<Catalog, CatalogErrors> {
        let catalog = Catalog::decode(blobs)?;
        catalog.validate()?;
        Ok(catalog)
    }

    /// Only the reading of [`Catalog::from_blobs`]: blobs that cannot be read as their schema
    /// are errors, but a catalog whose graph is wrong is returned, so tools can show or
    /// compare catalogs that are not (yet) valid. When a blob fails, the graph is not checked
    /// (its problems would mostly echo the missing blob).
    pub fn decode(blobs: impl IntoIterator<Item = (String, Value)>) -> Result<Catalog, CatalogErrors> {
        let mut catalog = Catalog::default();
        let mut errors = Vec::new();
        for (source, value) in blobs {
            if let Err(message) = catalog.add_blob(&source, value) {
                errors.push(CatalogError::Blob { blob: shown(&source), message });
            }
        }
        if errors.is_empty() {
            Ok(catalog)
        } else {
            Err(CatalogErrors(errors))
        }
    }

    fn add_blob(&mut self, source: &str, value: Value) -> Result<(), String> {
        let Value::Object(mut map) = value else {
            return Err(format!("a blob must be an object, got {}", kind_of(&value)));
        };
        duplicate_keys(&map)?;
        let schema = meta_string(&map, "schema")?;
        let package = meta_string(&map, "package")?;
        let name = meta_string(&map, "name")?;
        if schema.is_empty() {
            return Err(format!("object '{}' is missing root schema field", shown(&Value::Object(map).to_string())));
        }
        match schema.as_str() {
            SCHEMA_PACKAGE => {
                fold(&mut map, PACKAGE_FIELDS, &[]);
                if let Some(Value::Object(icon)) = map.get_mut("icon") {
                    fold(icon, ICON_FIELDS, &[]);
                }
                fold_properties(&mut map);
                let mut p: Package = typed(map, "package")?;
                if let Some(icon) = &p.icon {
                    decode_base64(&icon.data).map_err(|e| format!("parse package: icon.base64data: {e}"))?;
                }
                p.source = source.to_string();
                self.packages.push(p);
            }
            SCHEMA_CHANNEL => {
                fold(&mut map, CHANNEL_FIELDS, &[]);
                fold_each(&mut map, "entries", ENTRY_FIELDS, &[]);
                if let Some(Value::Array(entries)) = map.get_mut("entries") {
                    for entry in entries {
                        if let Some(Value::Array(skips)) = entry.get_mut("skips") {
                            for skip in skips.iter_mut().filter(|s| s.is_null()) {
                                *skip = Value::String(String::new());
                            }
                        }
                    }
                }
                fold_properties(&mut map);
                let mut c: Channel = typed(map, "channel")?;
                c.source = source.to_string();
                self.channels.push(c);
            }
            SCHEMA_BUNDLE => {
                fold(&mut map, BUNDLE_FIELDS, &[]);
                fold_properties(&mut map);
                fold_each(&mut map, "relatedImages", RELATED_IMAGE_FIELDS, &[]);
                let mut b: Bundle = typed(map, "bundle")?;
                for (i, p) in b.properties.iter().enumerate() {
                    if p.type_ == PROPERTY_BUNDLE_OBJECT {
                        bundle_object_data(p).map_err(|e| {
                            format!(
                                "package {}, bundle {}: parse property at index {i} as bundle object: {e}",
                                go_quote(&b.package),
                                go_quote(&b.name)
                            )
                        })?;
                    }
                }
                b.source = source.to_string();
                self.bundles.push(b);
            }
            SCHEMA_DEPRECATIONS => {
                fold(&mut map, DEPRECATIONS_FIELDS, &[]);
                fold_each(&mut map, "entries", DEPRECATION_ENTRY_FIELDS, &[]);
                if let Some(Value::Array(entries)) = map.get_mut("entries") {
                    for entry in entries {
                        if let Some(Value::Object(r)) = entry.get_mut("reference") {
                            fold(r, REFERENCE_FIELDS, &[]);
                        }
                    }
                }
                let mut d: Deprecations = typed(map, "deprecation")?;
                d.source = source.to_string();
                self.deprecations.push(d);
            }
            _ => self.others.push(OtherBlob {
                source: source.to_string(),
                schema,
                package,
                name,
                value: Value::Object(map),
            }),
        }
        Ok(())
    }

    /// The package's blob (the first, if the catalog has duplicates).
    pub fn package(&self, name: &str) -> Option<&Package> {
        self.packages.iter().find(|p| p.name == name)
    }

    pub fn channels_of<'a, 'p>(&'a self, package: &'p str) -> impl Iterator<Item = &'a Channel> + use<'a, 'p> {
        self.channels.iter().filter(move |c| c.package == package)
    }

    pub fn channel(&self, package: &str, name: &str) -> Option<&Channel> {
        self.channels_of(package).find(|c| c.name == name)
    }

    pub fn bundles_of<'a, 'p>(&'a self, package: &'p str) -> impl Iterator<Item = &'a Bundle> + use<'a, 'p> {
        self.bundles.iter().filter(move |b| b.package == package)
    }

    /// A bundle by package and name: names are unique within a package, not across a catalog.
    pub fn bundle(&self, package: &str, name: &str) -> Option<&Bundle> {
        self.bundles_of(package).find(|b| b.name == name)
    }

    /// The package's default channel; `None` for an unknown package or one that names none.
    pub fn default_channel(&self, package: &str) -> Option<&str> {
        self.package(package).map(|p| p.default_channel.as_str()).filter(|c| !c.is_empty())
    }

    /// The package's `olm.deprecations` blob, if it has one.
    pub fn deprecations_of(&self, package: &str) -> Option<&Deprecations> {
        self.deprecations.iter().find(|d| d.package == package)
    }
}

/// opm refuses a blob whose top-level keys differ only in case: which one counts would be a
/// guess.
fn duplicate_keys(map: &Map<String, Value>) -> Result<(), String> {
    let mut groups: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for key in map.keys() {
        groups.entry(key.to_lowercase()).or_default().push(key);
    }
    let dups: Vec<String> = groups
        .iter()
        .filter(|(_, keys)| keys.len() > 1)
        .map(|(folded, keys)| {
            let mut keys: Vec<String> = keys.iter().map(|k| shown(k)).collect();
            keys.sort();
            format!("duplicate keys for key {}: [{}]", go_quote(folded), keys.join(" "))
        })
        .collect();
    match dups.len() {
        0 => Ok(()),
        1 => Err(dups.join("")),
        _ => Err(format!("[{}]", dups.join(", "))),
    }
}

/// `schema`, `package` or `name` (any case), which opm reads before the blob's schema is known:
/// when present it must be a string.
fn meta_string(map: &Map<String, Value>, key: &str) -> Result<String, String> {
    let Some((k, v)) = map.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)) else { return Ok(String::new()) };
    match v {
        Value::String(s) => Ok(s.clone()),
        other => Err(format!("expected value for key {} to be a string, got {}", go_quote(k), kind_of(other))),
    }
}

/// The decoded `data` of an `olm.bundle.object` property (empty when absent or null, as Go
/// reads it).
fn bundle_object_data(p: &Property) -> Result<Vec<u8>, String> {
    let data = match &p.value {
        None => return Err("unexpected end of JSON input".into()),
        Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => match m.iter().find(|(k, _)| k.eq_ignore_ascii_case("data")).map(|(_, v)| v) {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::String(s)) => s,
            Some(other) => return Err(format!("data: invalid type: {}, expected a base64 string", kind_of(other))),
        },
        Some(other) => return Err(format!("invalid type: {}, expected an object", kind_of(other))),
    };
    decode_base64(data)
}

/// A property's value as `T`, as Go's decoder reads it (keys in any case, null as the zero
/// value, a missing value refused).
fn value_as<T: DeserializeOwned + Default>(p: &Property, fields: &[&str]) -> Result<T, String> {
    match &p.value {
        None => Err("unexpected end of JSON input".into()),
        Some(Value::Null) => Ok(T::default()),
        Some(v) => {
            let mut v = v.clone();
            if let Value::Object(m) = &mut v {
                fold(m, fields, &[]);
            }
            serde_json::from_value(v).map_err(|e| shown(&in_json_terms(&e.to_string())))
        }
    }
}

const PACKAGE_PROPERTY_FIELDS: &[&str] = &["packageName", "version", "release"];
const GVK_FIELDS: &[&str] = &["group", "version", "kind"];
const PACKAGE_REQUIRED_FIELDS: &[&str] = &["packageName", "versionRange"];

/// `olm.channel` as a bundle property (from sqlite-era catalogs): only checked to read.
#[derive(Default, Deserialize)]
#[allow(dead_code)]
struct ChannelProperty {
    #[serde(default, rename = "channelName")]
    channel_name: String,
}

/// Whether a property reads as its type says, as opm's `property.Parse` checks it when it builds
/// its model (unknown types need only a value).
pub(crate) fn check_property(p: &Property) -> Result<(), String> {
    match p.type_.as_str() {
        PROPERTY_PACKAGE => value_as::<PackageProperty>(p, PACKAGE_PROPERTY_FIELDS).map(drop),
        PROPERTY_PACKAGE_REQUIRED => value_as::<PackageRequired>(p, PACKAGE_REQUIRED_FIELDS).map(drop),
        PROPERTY_GVK | PROPERTY_GVK_REQUIRED => value_as::<Gvk>(p, GVK_FIELDS).map(drop),
        PROPERTY_BUNDLE_OBJECT => bundle_object_data(p).map(drop),
        PROPERTY_CHANNEL => value_as::<ChannelProperty>(p, &["channelName"]).map(drop),
        PROPERTY_CSV_METADATA => match &p.value {
            None => Err("unexpected end of JSON input".into()),
            Some(Value::Null | Value::Object(_)) => Ok(()),
            Some(other) => Err(format!("invalid type: {}, expected an object", kind_of(other))),
        },
        _ => p.value.as_ref().map(drop).ok_or_else(|| "unexpected end of JSON input".to_string()),
    }
}

impl Bundle {
    pub fn properties_of<'a>(&'a self, type_: &'a str) -> impl Iterator<Item = &'a Property> + 'a {
        self.properties.iter().filter(move |p| p.type_ == type_)
    }

    fn error(&self, message: String) -> PropertyError {
        PropertyError { bundle: shown(&self.name), message }
    }

    /// The single `olm.package` property opm requires of every bundle.
    pub fn package_property(&self) -> Result<PackageProperty, PropertyError> {
        let found: Vec<&Property> = self.properties_of(PROPERTY_PACKAGE).collect();
        let [p] = found[..] else {
            return Err(self.error(format!(
                "must have exactly 1 {} property, found {}",
                go_quote(PROPERTY_PACKAGE),
                found.len()
            )));
        };
        value_as(p, PACKAGE_PROPERTY_FIELDS)
            .map_err(|e| self.error(format!("parse property of type {}: {e}", go_quote(PROPERTY_PACKAGE))))
    }

    /// The bundle's version (from its `olm.package` property, read as blang reads it); `None`
    /// when it has none or an unreadable one ([`Bundle::version_checked`] says why).
    pub fn version(&self) -> Option<Version> {
        self.version_checked().ok()
    }

    pub fn version_checked(&self) -> Result<Version, PropertyError> {
        let p = self.package_property()?;
        parse_version(&p.version)
            .map_err(|e| self.error(format!("{PROPERTY_PACKAGE} version {}: {e}", go_quote(&p.version))))
    }

    /// The APIs the bundle provides (`olm.gvk`); unreadable ones are left out (a validated
    /// catalog has none).
    pub fn provided_gvks(&self) -> Vec<Gvk> {
        self.properties_of(PROPERTY_GVK).filter_map(|p| value_as(p, GVK_FIELDS).ok()).collect()
    }

    /// The APIs the bundle needs some installed bundle to provide (`olm.gvk.required`).
    pub fn required_gvks(&self) -> Vec<Gvk> {
        self.properties_of(PROPERTY_GVK_REQUIRED).filter_map(|p| value_as(p, GVK_FIELDS).ok()).collect()
    }

    /// The packages the bundle needs installed with it (`olm.package.required`); ranges are left
    /// as written, since OLM reads them only when it resolves (and some real catalogs carry
    /// ranges blang refuses, such as `v0.1.0`).
    pub fn required_packages(&self) -> Vec<PackageRequired> {
        self.properties_of(PROPERTY_PACKAGE_REQUIRED)
            .filter_map(|p| value_as(p, PACKAGE_REQUIRED_FIELDS).ok())
            .collect()
    }

    /// The highest OpenShift minor the bundle supports (`olm.maxOpenShiftVersion`), as
    /// `(major, minor)`; `None` when absent or unreadable ([`Bundle::max_openshift_version_checked`]
    /// says why, as OLM's Upgradeable condition does).
    pub fn max_openshift_version(&self) -> Option<(u64, u64)> {
        self.max_openshift_version_checked().ok().flatten()
    }

    /// OLM's reading: the value's text with surrounding quotes trimmed, read tolerantly (`v4.8`,
    /// `4.08`), and it must be a bare `<major>.<minor>`; more than one such property is an
    /// error. `"4.8"` and `4.8` read as OLM reads them; a string that carries its own quotes
    /// (`"\"4.8\""`, which some bundle tools write) is read too, where OLM would refuse it:
    /// this value only gates cluster updates, and a readable limit is safer than none. A JSON
    /// number loses trailing zeros once decoded (`4.10` becomes `4.1`): write it as a string.
    pub fn max_openshift_version_checked(&self) -> Result<Option<(u64, u64)>, PropertyError> {
        let found: Vec<&Property> = self.properties_of(PROPERTY_MAX_OPENSHIFT_VERSION).collect();
        let p = match found[..] {
            [] => return Ok(None),
            [p] => p,
            _ => {
                return Err(self.error(format!(
                    "defining more than one {} property is not allowed",
                    go_quote(PROPERTY_MAX_OPENSHIFT_VERSION)
                )))
            }
        };
        let raw = match &p.value {
            Some(Value::String(s)) => s.trim_matches('"').to_string(),
            Some(v) => v.to_string().trim_matches('"').to_string(),
            None => String::new(),
        };
        if raw.is_empty() {
            return Err(self.error("value cannot be \"\" (an empty string)".into()));
        }
        let v = super::range::parse_version_tolerant(&raw)
            .map_err(|e| self.error(format!("failed to parse {} as semver: {e}", go_quote(&raw))))?;
        if v.patch != 0 || !v.pre.is_empty() {
            return Err(self.error(format!(
                "property {PROPERTY_MAX_OPENSHIFT_VERSION} must specify only <major>.<minor> version, got invalid value {v}"
            )));
        }
        Ok(Some((v.major, v.minor)))
    }

    /// `olm.csv.metadata` (newer catalogs): the CSV's display fields without its manifests.
    pub fn csv_metadata(&self) -> Option<&Value> {
        self.properties_of(PROPERTY_CSV_METADATA).find_map(|p| p.value.as_ref())
    }

    /// The manifests carried inline as `olm.bundle.object` properties (older catalogs, and
    /// what aloft installs from): the ClusterServiceVersion and the other objects, decoded from
    /// base64. opm accepts YAML there too; only JSON (what opm writes) is read here, and other
    /// data is an error naming the property.
    pub fn objects(&self) -> Result<Vec<Value>, PropertyError> {
        let mut out = Vec::new();
        for (i, p) in self.properties.iter().enumerate().filter(|(_, p)| p.type_ == PROPERTY_BUNDLE_OBJECT) {
            let what = |e: String| self.error(format!("property [{i}] ({PROPERTY_BUNDLE_OBJECT}): {e}"));
            let data = bundle_object_data(p).map_err(what)?;
            if data.is_empty() {
                continue;
            }
            let v: Value = serde_json::from_slice(&data).map_err(|e| {
                what(format!("the manifest is not JSON ({}): aloft reads only JSON manifests", shown(&e.to_string())))
            })?;
            out.push(v);
        }
        Ok(out)
    }

    /// A CSV field for people (`displayName`, `description`): from `olm.csv.metadata`, else
    /// from the CSV among the bundle's objects.
    pub fn csv_field(&self, field: &str) -> Option<String> {
        if let Some(s) = self.csv_metadata().and_then(|m| m.get(field)).and_then(Value::as_str) {
            return Some(s.to_string());
        }
        let objects = self.objects().ok()?;
        let csv = objects.iter().find(|o| o.get("kind").and_then(Value::as_str) == Some("ClusterServiceVersion"))?;
        csv.pointer(&format!("/spec/{field}")).and_then(Value::as_str).map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bundle(properties: Value) -> Bundle {
        let blob = json!({"schema": "olm.bundle", "name": "b.v1", "package": "b", "image": "example.com/b:1", "properties": properties});
        let mut c = Catalog::decode([("t#1".to_string(), blob)]).unwrap();
        c.bundles.remove(0)
    }

    #[test]
    fn keys_in_any_case_and_nulls_read_as_go_reads_them() {
        let blobs = vec![
            (
                "a#1".to_string(),
                json!({"Schema": "olm.package", "Name": "a", "DefaultChannel": "stable", "Description": null}),
            ),
            (
                "a#2".to_string(),
                json!({"schema": "olm.channel", "PACKAGE": "a", "name": "stable",
                       "Entries": [{"Name": "a.v1", "Replaces": null, "SKIPS": [null, "x"], "SkipRange": "<1.0.0"}, null]}),
            ),
            (
                "a#3".to_string(),
                json!({"schema": "olm.bundle", "name": "a.v1", "package": "a", "image": null,
                       "Properties": [{"Type": "olm.package", "Value": {"PackageName": "a", "VERSION": "1.0.0"}},
                                      {"type": "x.custom", "value": null}],
                       "relatedImages": [{"Name": "op", "IMAGE": "example.com/op:1"}], "x-note": {"kept": true}}),
            ),
        ];
        let c = Catalog::decode(blobs).unwrap();
        assert_eq!(c.packages[0].default_channel, "stable");
        assert_eq!(c.packages[0].description, "");
        assert_eq!(c.packages[0].source, "a#1");
        let e = &c.channels[0].entries;
        assert_eq!((e[0].name.as_str(), e[0].replaces.as_str(), e[0].skip_range.as_str()), ("a.v1", "", "<1.0.0"));
        assert_eq!(e[0].skips, ["", "x"]);
        assert_eq!(e[1], ChannelEntry::default());
        let b = &c.bundles[0];
        assert_eq!(b.version(), Some(Version::new(1, 0, 0)));
        assert_eq!(b.properties[1].value, Some(Value::Null));
        assert_eq!(b.related_images[0].image, "example.com/op:1");
        assert_eq!(b.extra["x-note"], json!({"kept": true}));
        // Unknown fields survive a round trip.
        let back = serde_json::to_value(b).unwrap();
        assert_eq!(back["x-note"], json!({"kept": true}));
        assert_eq!(back["relatedImages"][0]["name"], "op");
    }

    #[test]
    fn blobs_that_cannot_be_read_name_their_source() {
        let err = |blob: Value| Catalog::decode([("f.yaml#2".to_string(), blob)]).unwrap_err().to_string();
        assert_eq!(err(json!({"name": "a"})), "f.yaml#2: object '{\"name\":\"a\"}' is missing root schema field");
        assert_eq!(err(json!({"schema": ""})), "f.yaml#2: object '{\"schema\":\"\"}' is missing root schema field");
        assert_eq!(err(json!(["olm.package"])), "f.yaml#2: a blob must be an object, got a list");
        assert_eq!(
            err(json!({"schema": "olm.package", "name": 5})),
            "f.yaml#2: expected value for key \"name\" to be a string, got a number"
        );
        assert_eq!(
            err(json!({"schema": "olm.package", "name": null})),
            "f.yaml#2: expected value for key \"name\" to be a string, got null"
        );
        assert_eq!(
            err(json!({"schema": "olm.package", "name": "a", "Name": "b"})),
            "f.yaml#2: duplicate keys for key \"name\": [Name name]"
        );
        assert_eq!(
            err(
                json!({"schema": "olm.channel", "name": "s", "package": "a", "entries": [{"name": "a.v1", "skips": "a.v0"}]})
            ),
            "f.yaml#2: parse channel: entries[0].skips: invalid type: string \"a.v0\", expected a list"
        );
        assert_eq!(
            err(json!({"schema": "olm.package", "name": "a", "icon": {"base64data": "!!", "mediatype": "image/png"}})),
            "f.yaml#2: parse package: icon.base64data: illegal base64 data at input byte 0"
        );
        assert_eq!(
            err(json!({"schema": "olm.bundle", "name": "a.v1", "package": "a",
                       "properties": [{"type": "olm.bundle.object", "value": {"data": "eyJ9!"}}]})),
            "f.yaml#2: package \"a\", bundle \"a.v1\": parse property at index 0 as bundle object: illegal base64 data \
             at input byte 4"
        );
        // Other schemas are kept, not read.
        let c = Catalog::decode([("t#1".to_string(), json!({"schema": "olm.template.basic", "name": 1}))]);
        assert!(c.is_err());
        let c = Catalog::decode([("t#1".to_string(), json!({"schema": "olm.template.basic", "entries": []}))]).unwrap();
        assert_eq!((c.others.len(), c.others[0].schema.as_str()), (1, "olm.template.basic"));
    }

    #[test]
    fn bundle_properties() {
        let b = bundle(json!([
            {"type": "olm.package", "value": {"packageName": "b", "version": "1.2.3-rc.1"}},
            {"type": "olm.gvk", "value": {"group": "example.com", "version": "v1", "kind": "Thing"}},
            {"type": "olm.gvk.required", "value": {"group": "other.io", "version": "v1beta1", "kind": "Dep"}},
            {"type": "olm.package.required", "value": {"packageName": "dep", "versionRange": ">=1.0.0 <2.0.0"}},
            {"type": "olm.csv.metadata", "value": {"displayName": "B", "description": "Does b"}},
            {"type": "olm.maxOpenShiftVersion", "value": "4.8"},
            {"type": "olm.bundle.object", "value": {"data": "eyJraW5kIjoiQ29uZmlnTWFwIn0="}},
        ]));
        assert_eq!(b.version(), Some(Version::parse("1.2.3-rc.1").unwrap()));
        assert_eq!(
            b.provided_gvks(),
            [Gvk { group: "example.com".into(), version: "v1".into(), kind: "Thing".into() }]
        );
        assert_eq!(b.required_gvks()[0].kind, "Dep");
        assert_eq!(
            b.required_packages(),
            [PackageRequired { package_name: "dep".into(), version_range: ">=1.0.0 <2.0.0".into() }]
        );
        assert_eq!(b.max_openshift_version(), Some((4, 8)));
        assert_eq!(b.csv_metadata().unwrap()["displayName"], "B");
        assert_eq!(b.csv_field("description").as_deref(), Some("Does b"));
        assert_eq!(b.objects().unwrap(), [json!({"kind": "ConfigMap"})]);

        let two = bundle(json!([
            {"type": "olm.package", "value": {"packageName": "b", "version": "1.0.0"}},
            {"type": "olm.package", "value": {"packageName": "b", "version": "2.0.0"}},
        ]));
        assert_eq!(two.version(), None);
        assert_eq!(
            two.version_checked().unwrap_err().to_string(),
            "bundle \"b.v1\": must have exactly 1 \"olm.package\" property, found 2"
        );
        let bad = bundle(json!([{"type": "olm.package", "value": {"packageName": "b", "version": "1.0"}}]));
        assert_eq!(
            bad.version_checked().unwrap_err().to_string(),
            "bundle \"b.v1\": olm.package version \"1.0\": No Major.Minor.Patch elements found"
        );
        let yaml = bundle(json!([{"type": "olm.bundle.object", "value": {"data": "a2luZDogQ29uZmlnTWFw"}}]));
        let e = yaml.objects().unwrap_err().to_string();
        assert!(e.starts_with("bundle \"b.v1\": property [0] (olm.bundle.object): the manifest is not JSON"), "{e}");
    }

    #[test]
    fn max_openshift_version_as_olm_reads_it() {
        let with = |value: Value| bundle(json!([{"type": "olm.maxOpenShiftVersion", "value": value}]));
        for (value, want) in [
            (json!("4.8"), (4, 8)),
            (json!("\"4.9\""), (4, 9)),
            (json!(4.8), (4, 8)),
            (json!("4.12"), (4, 12)),
            (json!("v4.10"), (4, 10)),
            (json!("4"), (4, 0)),
            (json!("4.08"), (4, 8)),
        ] {
            assert_eq!(with(value.clone()).max_openshift_version_checked().unwrap(), Some(want), "{value}");
        }
        for (value, why) in [
            (json!(""), "value cannot be \"\" (an empty string)"),
            (json!("\"\""), "value cannot be \"\" (an empty string)"),
            (
                json!("4.8.1"),
                "property olm.maxOpenShiftVersion must specify only <major>.<minor> version, got invalid value 4.8.1",
            ),
            // blang's tolerant reading pads "four" with a zero before failing on it.
            (json!("four"), "failed to parse \"four\" as semver: Invalid character(s) found in major number \"0four\""),
            (
                json!("4.8-rc"),
                "failed to parse \"4.8-rc\" as semver: Short version cannot contain PreRelease/Build meta data",
            ),
        ] {
            let b = with(value.clone());
            assert_eq!(b.max_openshift_version(), None);
            assert_eq!(b.max_openshift_version_checked().unwrap_err().message, why, "{value}");
        }
        assert_eq!(bundle(json!([])).max_openshift_version_checked(), Ok(None));
        let twice = bundle(json!([
            {"type": "olm.maxOpenShiftVersion", "value": "4.8"},
            {"type": "olm.maxOpenShiftVersion", "value": "4.9"},
        ]));
        assert_eq!(
            twice.max_openshift_version_checked().unwrap_err().message,
            "defining more than one \"olm.maxOpenShiftVersion\" property is not allowed"
        );
    }

    #[test]
    fn base64_as_go_decodes_it() {
        assert_eq!(decode_base64("aGk=").unwrap(), b"hi");
        assert_eq!(decode_base64("aG\nk=").unwrap(), b"hi");
        assert_eq!(decode_base64("aGl=").unwrap(), b"hi");
        assert_eq!(decode_base64("aGk").unwrap_err(), "illegal base64 data at input byte 3");
        assert_eq!(decode_base64("a*k=").unwrap_err(), "illegal base64 data at input byte 1");
        assert_eq!(decode_base64("").unwrap(), b"");
    }
}
