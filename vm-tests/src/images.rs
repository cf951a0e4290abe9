//! The OS images: built (or reused from the cache) by `images/build`, described by its
//! `manifest.json`.

use crate::env;
use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::sync::OnceCell;

/// What `images/build --out DIR` wrote.
#[derive(Debug)]
pub struct Images {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// The fields of `manifest.json` the harness reads.
#[derive(Debug, Deserialize)]
pub struct Manifest {
    #[serde(rename = "ref")]
    pub ref_: String,
    /// Commit checksums by version (`v1`, `v2`, `v3`).
    pub commits: BTreeMap<String, String>,
    pub boot: BTreeMap<String, BootFiles>,
    pub inputs_hash: String,
    /// Whether the image's agent has failpoints (`--with-failpoints`; absent in older outputs).
    #[serde(default)]
    pub agent_failpoints: bool,
}

/// A boot entry's files, relative to the output directory.
#[derive(Debug, Deserialize)]
pub struct BootFiles {
    pub kernel: String,
    pub initrd: String,
    pub cmdline: String,
}

/// The address guests reach the host's services at (a `guestfwd`; see images/README.md).
pub const HOST_ADDR: &str = "10.0.2.100";

impl Images {
    pub fn load(dir: &Path) -> Result<Images> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let manifest: Manifest = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        Ok(Images { dir: dir.to_path_buf(), manifest })
    }

    /// The raw disk with v1 deployed (the backing file of every VM's overlay; never written).
    pub fn disk(&self) -> PathBuf {
        self.dir.join("disk.raw")
    }

    /// The archive repo served to the guests.
    pub fn repo(&self) -> PathBuf {
        self.dir.join("repo")
    }

    /// The checksum of commit `version` ("v1", "v2", "v3").
    pub fn commit(&self, version: &str) -> Result<&str> {
        self.manifest
            .commits
            .get(version)
            .map(String::as_str)
            .ok_or_else(|| anyhow!("the images have no commit {version} (built: {:?})", self.manifest.commits.keys()))
    }

    /// The osImageURL naming commit `version`, served by the harness at `http://10.0.2.100/repo`.
    pub fn os_image_url(&self, version: &str) -> Result<String> {
        Ok(format!("ostree+http://{HOST_ADDR}/repo#{}@{}", self.manifest.ref_, self.commit(version)?))
    }

    /// v1's boot entry: (kernel, initrd, kernel command line).
    pub fn first_boot(&self) -> Result<(PathBuf, PathBuf, String)> {
        let b = self.manifest.boot.get("v1").ok_or_else(|| anyhow!("manifest.json has no boot.v1"))?;
        Ok((self.dir.join(&b.kernel), self.dir.join(&b.initrd), b.cmdline.clone()))
    }
}

/// The images every VM test uses: `images/build --out target/vm-tests/images --with-bad-commit
/// --with-failpoints` (v1, v2 and the failing v3; an agent whose failpoints `ALOFT_FAILPOINTS`
/// arms), once per test process. A no-op of a few seconds when cached in
/// `/var/cache/aloft-images`; a cold build takes 4-8 minutes. `ALOFT_VM_IMAGES=DIR` uses an
/// existing output directory as it is (no build).
pub async fn ensure() -> Result<&'static Images> {
    static IMAGES: OnceCell<Images> = OnceCell::const_new();
    IMAGES.get_or_try_init(build).await
}

async fn build() -> Result<Images> {
    if let Some(dir) = std::env::var_os("ALOFT_VM_IMAGES").filter(|d| !d.is_empty()) {
        tracing::info!(dir = %Path::new(&dir).display(), "using the images in ALOFT_VM_IMAGES as they are");
        return Images::load(Path::new(&dir));
    }
    let out = env::target_dir().join("vm-tests/images");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let log_path = env::target_dir().join("vm-tests/images-build.log");
    let log = std::fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let script = env::workspace_root().join("images/build");
    tracing::info!(
        out = %out.display(), log = %log_path.display(),
        "images/build --with-bad-commit --with-failpoints --cargo-profile vm-image (seconds when cached, 4-8 minutes cold)"
    );
    let started = Instant::now();
    let status = tokio::process::Command::new(&script)
        .arg("--out")
        .arg(&out)
        .arg("--with-bad-commit")
        .arg("--with-failpoints")
        // scripts/test.sh builds the images with the same arguments (then passes ALOFT_VM_IMAGES).
        .args(["--cargo-profile", "vm-image"])
        .current_dir(env::workspace_root())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .status()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        bail!("images/build failed ({status}); log {}:\n{}", log_path.display(), tail.join("\n"));
    }
    let images = Images::load(&out)?;
    tracing::info!(
        secs = started.elapsed().as_secs_f64(), inputs = %images.manifest.inputs_hash,
        v1 = %images.commit("v1")?, v2 = %images.commit("v2")?, "images ready"
    );
    Ok(images)
}
