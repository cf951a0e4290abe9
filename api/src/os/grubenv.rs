//! GRUB's environment block (`grubenv`) and the boot counting greenboot keeps in it.
//!
//! Why: a new OS whose kernel panics or whose root never mounts never runs the agent, so no
//! health check can roll it back. Only the bootloader can: before the reboot into an update the
//! OS arms a counter in the environment block; GRUB takes one off at each boot that follows one
//! not marked good, and once it runs out boots the previous entry; the first healthy boot marks
//! itself good and disarms the counter. These are the variables and the rules of greenboot's
//! GRUB scripts (`08_fallback_counting`, `10_reset_boot_success`) and of its
//! `greenboot-grub2-set-counter` / `greenboot-grub2-set-success`, as RHEL for Edge, Fedora IoT and
//! Flight Control run them, so a GRUB set up for greenboot counts aloft's updates unchanged.
//!
//! The block itself: exactly as `grub-editenv` writes it (1024 bytes by default), the
//! signature line, `name=value` lines (a backslash escapes a backslash or a newline in a value),
//! and `#` up to the end. GRUB writes it in place through the file's block list and never
//! changes its size, so neither does this module. No maintained crate reads or writes it (the
//! field calls `grub2-editenv`, which the image need not carry), and the format is these few
//! lines, so it is written here.
//!
//! [`bootloader_pass`] is the bootloader's half. aloft's VM tests boot kernels directly and play
//! the bootloader; they run it to count as GRUB would. The OS's half is [`arm`] and [`disarm`].

/// The first line of every environment block.
pub const SIGNATURE: &str = "# GRUB Environment Block\n";
/// The size `grub-editenv create` gives a block.
pub const DEFAULT_SIZE: usize = 1024;
/// Boots left for the entry booted after an update; `-1` once GRUB fell back to the previous one.
pub const BOOT_COUNTER: &str = "boot_counter";
/// `1` once the running boot was found healthy; GRUB resets it to `0` at every boot.
pub const BOOT_SUCCESS: &str = "boot_success";

/// What is wrong with a block or a change to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrubEnvError {
    #[error("not a GRUB environment block (it does not start with {:?})", SIGNATURE.trim_end())]
    NoSignature,
    #[error("GRUB environment block: line {line} is neither a comment nor name=value in UTF-8")]
    Malformed { line: usize },
    #[error("GRUB environment block: the variables take {need} bytes, more than the block's {size}")]
    TooLarge { need: usize, size: usize },
    #[error("GRUB environment block: {0:?} is not a variable name (letters, digits and _ only)")]
    InvalidName(String),
}

/// A parsed environment block: its variables in order, and its size (kept when written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvBlock {
    vars: Vec<(String, String)>,
    size: usize,
}

impl Default for EnvBlock {
    fn default() -> Self {
        EnvBlock { vars: Vec::new(), size: DEFAULT_SIZE }
    }
}

impl EnvBlock {
    /// Read a block as GRUB's `load_env` does: the signature, then `name=value` lines; lines
    /// that start with `#` (the padding) are skipped.
    pub fn parse(bytes: &[u8]) -> Result<EnvBlock, GrubEnvError> {
        let rest = bytes.strip_prefix(SIGNATURE.as_bytes()).ok_or(GrubEnvError::NoSignature)?;
        let mut vars: Vec<(String, String)> = Vec::new();
        let mut line = 1;
        let mut i = 0;
        while i < rest.len() {
            line += 1;
            if rest[i] == b'#' || rest[i] == b'\n' {
                // A comment, the padding, or an empty line: to the end of the line.
                i = rest[i..].iter().position(|&b| b == b'\n').map_or(rest.len(), |n| i + n + 1);
                continue;
            }
            let eq = rest[i..].iter().position(|&b| b == b'=' || b == b'\n').map(|n| i + n);
            let Some(eq) = eq.filter(|&e| rest[e] == b'=') else { return Err(GrubEnvError::Malformed { line }) };
            // Not UTF-8: refused rather than rewritten with replacement characters.
            let text = |b: Vec<u8>| String::from_utf8(b).map_err(|_| GrubEnvError::Malformed { line });
            let name = text(rest[i..eq].to_vec())?;
            let mut value = Vec::new();
            let mut j = eq + 1;
            loop {
                match rest.get(j) {
                    None => return Err(GrubEnvError::Malformed { line }),
                    Some(b'\n') => break,
                    Some(b'\\') if j + 1 < rest.len() => {
                        value.push(rest[j + 1]);
                        j += 2;
                    }
                    Some(&b) => {
                        value.push(b);
                        j += 1;
                    }
                }
            }
            let value = text(value)?;
            match vars.iter_mut().find(|(n, _)| *n == name) {
                Some(v) => v.1 = value,
                None => vars.push((name, value)),
            }
            i = j + 1;
        }
        Ok(EnvBlock { vars, size: bytes.len() })
    }

    /// The block as `grub-editenv` writes it, in its own size.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GrubEnvError> {
        let mut out = SIGNATURE.as_bytes().to_vec();
        for (name, value) in &self.vars {
            out.extend_from_slice(name.as_bytes());
            out.push(b'=');
            for &b in value.as_bytes() {
                if b == b'\\' || b == b'\n' {
                    out.push(b'\\');
                }
                out.push(b);
            }
            out.push(b'\n');
        }
        if out.len() > self.size {
            return Err(GrubEnvError::TooLarge { need: out.len(), size: self.size });
        }
        out.resize(self.size, b'#');
        Ok(out)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Set `name` (kept in its place if it was set); refused unless it is a plain name.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), GrubEnvError> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(GrubEnvError::InvalidName(name.to_string()));
        }
        match self.vars.iter_mut().find(|(n, _)| n == name) {
            Some(v) => v.1 = value.to_string(),
            None => self.vars.push((name.to_string(), value.to_string())),
        }
        Ok(())
    }

    /// Remove `name`; whether it was set.
    pub fn unset(&mut self, name: &str) -> bool {
        let before = self.vars.len();
        self.vars.retain(|(n, _)| n != name);
        self.vars.len() != before
    }

    /// The variables, in order.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

/// Before the reboot into an update: `attempts` boots for the new entry, counted from now
/// (`greenboot-grub2-set-counter`; greenboot's default is 3).
pub fn arm(env: &mut EnvBlock, attempts: u32) -> Result<(), GrubEnvError> {
    env.set(BOOT_COUNTER, &attempts.to_string())?;
    env.set(BOOT_SUCCESS, "0")
}

/// A healthy boot, or an update given up before its reboot: nothing is counted any more, and
/// this boot is good (`greenboot-grub2-set-success`). Whether anything changed.
pub fn disarm(env: &mut EnvBlock) -> Result<bool, GrubEnvError> {
    let had_counter = env.unset(BOOT_COUNTER);
    let was_good = env.get(BOOT_SUCCESS) == Some("1");
    env.set(BOOT_SUCCESS, "1")?;
    Ok(had_counter || !was_good)
}

/// Whether GRUB gave up on the new entry and booted the previous one (`boot_counter=-1`).
pub fn fell_back(env: &EnvBlock) -> bool {
    env.get(BOOT_COUNTER) == Some("-1")
}

/// Which entry the bootloader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootChoice {
    /// The default entry (the newest deployment).
    Default,
    /// The previous one (`default=1`): the counter ran out.
    Fallback,
}

/// What GRUB's scripts do to the block at every boot, in their order: with a counter armed
/// and the last boot not marked good, take one off, or once none is left fall back for good
/// (`-1`, and the previous entry from then on until the OS disarms it); then mark this boot not
/// good yet. The caller saves the block when it changed.
pub fn bootloader_pass(env: &mut EnvBlock) -> Result<BootChoice, GrubEnvError> {
    let mut choice = BootChoice::Default;
    if let Some(counter) = env.get(BOOT_COUNTER).map(str::to_string) {
        if env.get(BOOT_SUCCESS) == Some("0") {
            if counter == "0" || counter == "-1" {
                choice = BootChoice::Fallback;
                env.set(BOOT_COUNTER, "-1")?;
            } else {
                // GRUB's `decrement` of a value that is not a number leaves 0 (its strtol).
                let n: i64 = counter.trim().parse().unwrap_or(1);
                env.set(BOOT_COUNTER, &(n - 1).to_string())?;
            }
        }
    }
    env.set(BOOT_SUCCESS, "0")?;
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `grub-editenv grubenv create; grub-editenv grubenv set boot_counter=3 boot_success=0`,
    /// byte for byte (GRUB 2.06).
    fn editenv_block() -> Vec<u8> {
        let mut b = b"# GRUB Environment Block\nboot_counter=3\nboot_success=0\n".to_vec();
        b.resize(1024, b'#');
        b
    }

    #[test]
    fn reads_and_writes_what_grub_editenv_writes() {
        let env = EnvBlock::parse(&editenv_block()).unwrap();
        assert_eq!(env.get(BOOT_COUNTER), Some("3"));
        assert_eq!(env.get(BOOT_SUCCESS), Some("0"));
        assert_eq!(env.to_bytes().unwrap(), editenv_block(), "written back unchanged");
        let mut empty = b"# GRUB Environment Block\n".to_vec();
        empty.resize(1024, b'#');
        assert_eq!(EnvBlock::default().to_bytes().unwrap(), empty);
        assert_eq!(EnvBlock::parse(&empty).unwrap(), EnvBlock::default());
    }

    #[test]
    fn values_escape_backslashes_and_newlines_and_the_size_is_kept() {
        let mut env = EnvBlock::parse(&[SIGNATURE.as_bytes(), &[b'#'; 487]].concat()).unwrap();
        env.set("saved_entry", "a\\b\nc").unwrap();
        let bytes = env.to_bytes().unwrap();
        assert_eq!(bytes.len(), 512, "a block keeps its size");
        assert!(bytes.starts_with(b"# GRUB Environment Block\nsaved_entry=a\\\\b\\\nc\n#"));
        assert_eq!(EnvBlock::parse(&bytes).unwrap().get("saved_entry"), Some("a\\b\nc"));
        env.set("big", &"x".repeat(600)).unwrap();
        assert_eq!(env.to_bytes(), Err(GrubEnvError::TooLarge { need: 25 + 20 + 605, size: 512 }));
    }

    #[test]
    fn refuses_what_is_not_a_block_or_a_name() {
        assert_eq!(EnvBlock::parse(b"boot_counter=3\n"), Err(GrubEnvError::NoSignature));
        assert_eq!(EnvBlock::parse(b""), Err(GrubEnvError::NoSignature));
        let no_eq = [SIGNATURE.as_bytes(), b"boot_counter\n###"].concat();
        assert_eq!(EnvBlock::parse(&no_eq), Err(GrubEnvError::Malformed { line: 2 }));
        let cut = [SIGNATURE.as_bytes(), b"boot_counter=3"].concat();
        assert_eq!(EnvBlock::parse(&cut), Err(GrubEnvError::Malformed { line: 2 }));
        let latin1 = [SIGNATURE.as_bytes(), b"x=1\ntitle=caf\xe9\n###"].concat();
        assert_eq!(EnvBlock::parse(&latin1), Err(GrubEnvError::Malformed { line: 3 }), "not rewritten lossily");
        let mut env = EnvBlock::default();
        for bad in ["", "a=b", "a\nb", "a b"] {
            assert_eq!(env.set(bad, "1"), Err(GrubEnvError::InvalidName(bad.into())));
        }
        assert_eq!(env, EnvBlock::default(), "a refused change changes nothing");
    }

    /// Three panicking boots of the new entry, then the previous one for good; the OS there
    /// sees the fallback, and disarming ends the counting.
    #[test]
    fn counts_down_falls_back_and_stops_once_disarmed() {
        let mut env = EnvBlock::default();
        assert_eq!(bootloader_pass(&mut env).unwrap(), BootChoice::Default, "nothing armed");
        assert_eq!(env.get(BOOT_COUNTER), None);
        arm(&mut env, 3).unwrap();
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push((bootloader_pass(&mut env).unwrap(), env.get(BOOT_COUNTER).unwrap().to_string()));
        }
        use BootChoice::*;
        let want = [(Default, "2"), (Default, "1"), (Default, "0"), (Fallback, "-1"), (Fallback, "-1")];
        assert_eq!(seen, want.map(|(c, n)| (c, n.to_string())));
        assert!(fell_back(&env));
        assert!(disarm(&mut env).unwrap());
        assert!(!fell_back(&env));
        assert_eq!((env.get(BOOT_COUNTER), env.get(BOOT_SUCCESS)), (None, Some("1")));
        assert!(!disarm(&mut env).unwrap(), "disarming twice changes nothing");
        assert_eq!(bootloader_pass(&mut env).unwrap(), Default);
        assert_eq!(env.get(BOOT_SUCCESS), Some("0"), "every boot starts not good yet");
    }

    /// The new entry came up and was marked good before a counter ran out: no fallback later.
    #[test]
    fn a_boot_marked_good_is_not_counted() {
        let mut env = EnvBlock::default();
        arm(&mut env, 2).unwrap();
        assert_eq!(bootloader_pass(&mut env).unwrap(), BootChoice::Default);
        env.set(BOOT_SUCCESS, "1").unwrap(); // an older OS that marks success but keeps the counter
        assert_eq!(bootloader_pass(&mut env).unwrap(), BootChoice::Default);
        assert_eq!(env.get(BOOT_COUNTER), Some("1"), "not taken off after a good boot");
    }
}
