//! Container image references as the controller reads and writes them. Every reference
//! comes from the API server (a workload's spec, an annotation someone wrote), so each
//! part is checked against the grammar registries accept before it is used.

use std::fmt;

use crate::error::InputError;

/// Registries refuse longer names; a longer one is not an image anyone can pull.
const MAX_REPOSITORY: usize = 255;
/// The OCI distribution spec's limit on a tag.
const MAX_TAG: usize = 128;

/// A parsed image reference: `repository[:tag][@digest]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

/// A content digest, `sha256:` and 64 lowercase hex digits (or `sha512:` and 128).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Digest(String);

impl Digest {
    pub fn parse(s: &str) -> Result<Self, InputError> {
        let bad = || InputError::Digest(shorten(s));
        let (algo, hex) = s.split_once(':').ok_or_else(bad)?;
        let len = match algo {
            "sha256" => 64,
            "sha512" => 128,
            _ => return Err(bad()),
        };
        if hex.len() != len || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad());
        }
        Ok(Self(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl ImageRef {
    /// Reads `what` (named in the error: the spec's image, an annotation) as a reference.
    pub fn parse(what: &'static str, s: &str) -> Result<Self, InputError> {
        let bad = |why: &'static str| InputError::Image {
            what,
            image: shorten(s),
            why,
        };
        if s.is_empty() {
            return Err(bad("it is empty"));
        }
        let (name, digest) = match s.split_once('@') {
            Some((name, d)) => (
                name,
                Some(Digest::parse(d).map_err(|_| bad("its digest is not sha256:<64 hex>"))?),
            ),
            None => (s, None),
        };
        // A ':' after the last '/' starts the tag; one before it is a registry's port.
        let slash = name.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match name[slash..].rfind(':') {
            Some(i) => (&name[..slash + i], Some(&name[slash + i + 1..])),
            None => (name, None),
        };
        check_repository(repository).map_err(bad)?;
        if let Some(tag) = tag {
            check_tag(tag).map_err(bad)?;
        }
        Ok(Self {
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// The only image the controller ever writes for an update: a tag and the digest it
/// resolved to, both required, so a tag moved in the registry afterwards changes nothing
/// on the cluster. There is no other constructor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedImage {
    repository: String,
    tag: String,
    digest: Digest,
}

impl PinnedImage {
    pub fn new(repository: &str, tag: &str, digest: Digest) -> Result<Self, InputError> {
        let bad = |why| InputError::Image {
            what: "pinned image",
            image: shorten(&format!("{repository}:{tag}")),
            why,
        };
        check_repository(repository).map_err(bad)?;
        check_tag(tag).map_err(bad)?;
        Ok(Self {
            repository: repository.to_string(),
            tag: tag.to_string(),
            digest,
        })
    }

    pub fn repository(&self) -> &str {
        &self.repository
    }
    pub fn tag(&self) -> &str {
        &self.tag
    }
    pub fn digest(&self) -> &Digest {
        &self.digest
    }
}

impl fmt::Display for PinnedImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}@{}", self.repository, self.tag, self.digest)
    }
}

/// What the caller's digest lookup found for `repository:tag` (the follow-up step a
/// [`crate::Decision::ResolveDigest`] asks for), given back on the next decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub repository: String,
    pub tag: String,
    pub digest: Digest,
}

fn check_repository(r: &str) -> Result<(), &'static str> {
    if r.is_empty() {
        return Err("it names no repository");
    }
    if r.len() > MAX_REPOSITORY {
        return Err("its repository is longer than 255 bytes");
    }
    if !r
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/' | b':'))
        || r.starts_with('/')
        || r.ends_with('/')
        || r.contains("//")
    {
        return Err("its repository holds characters a registry refuses");
    }
    Ok(())
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`, the tag grammar of the distribution spec.
pub(crate) fn check_tag(t: &str) -> Result<(), &'static str> {
    let mut bytes = t.bytes();
    match bytes.next() {
        None => return Err("its tag is empty"),
        Some(b) if b.is_ascii_alphanumeric() || b == b'_' => {}
        Some(_) => return Err("its tag does not start with a letter, digit or '_'"),
    }
    if t.len() > MAX_TAG {
        return Err("its tag is longer than 128 bytes");
    }
    if !bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')) {
        return Err("its tag holds characters other than letters, digits, '_', '.', '-'");
    }
    Ok(())
}

/// Untrusted text shown in an error: short, without control characters.
pub(crate) fn shorten(s: &str) -> String {
    let mut out: String = s.chars().filter(|c| !c.is_control()).take(80).collect();
    if s.chars().count() > 80 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_the_shapes_a_spec_holds() {
        let r = ImageRef::parse("image", "registry:5000/tern/agent:1.1.0").unwrap();
        assert_eq!(r.repository, "registry:5000/tern/agent");
        assert_eq!(r.tag.as_deref(), Some("1.1.0"));
        assert_eq!(r.digest, None);

        let r = ImageRef::parse("image", "registry:5000/agent").unwrap();
        assert_eq!(r.repository, "registry:5000/agent");
        assert_eq!(r.tag, None);

        let s = format!("tern/agent:1.1.0@{D}");
        let r = ImageRef::parse("image", &s).unwrap();
        assert_eq!(r.digest.as_ref().map(Digest::as_str), Some(D));
        assert_eq!(r.to_string(), s);
    }

    #[test]
    fn refuses_what_a_registry_refuses() {
        for bad in [
            "",
            "agent:",
            "agent:.1",
            "agent:1.0.0+build",
            "agent@sha256:12",
            "agent@md5:0123",
            "/agent:1",
            "ag ent:1",
            "agent:1\n",
        ] {
            assert!(ImageRef::parse("image", bad).is_err(), "{bad:?} was taken");
        }
        let long_tag = format!("agent:{}", "1".repeat(129));
        assert!(ImageRef::parse("image", &long_tag).is_err());
        let long_repo = format!("{}:1", "a".repeat(256));
        assert!(ImageRef::parse("image", &long_repo).is_err());
    }

    #[test]
    fn a_pinned_image_always_carries_its_digest() {
        let p = PinnedImage::new("tern/agent", "1.1.0", Digest::parse(D).unwrap()).unwrap();
        assert_eq!(p.to_string(), format!("tern/agent:1.1.0@{D}"));
        assert!(PinnedImage::new("tern/agent", "", Digest::parse(D).unwrap()).is_err());
    }
}
