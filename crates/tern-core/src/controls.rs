//! What operators set that holds or steers hosts besides the rollout resources: the
//! global freeze and the channels. Data the one answer (`gate`) reads and the admin
//! API (`api`, which re-exports them) carries.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The global kill switch (`ternctl agents freeze`): while it holds, find tells every
/// host not to update, channels give no version, no directive install is triggered or
/// handed out, and the rollout is held as if suspended. Lifted only by `unfreeze`: no
/// resource write undoes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freeze {
    pub reason: String,
    /// When the freeze began (a later freeze with another reason keeps it).
    pub since: Timestamp,
    /// The token id that froze.
    pub by: String,
    /// The products it holds; empty: every product.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub products: Vec<String>,
}

impl Freeze {
    /// The longest reason kept.
    pub(crate) const MAX_REASON: usize = 512;

    /// Checks a reason: said, one line, bounded.
    pub fn check_reason(reason: &str) -> Result<&str, String> {
        crate::domain::text::one_line(
            "reason",
            reason,
            Self::MAX_REASON,
            Some("say why updates are frozen (it is shown to everyone who asks)"),
        )
    }

    /// Whether it holds `product`'s installs.
    pub fn holds(&self, product: &str) -> bool {
        self.products.is_empty() || self.products.iter().any(|p| p == product)
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        let what = if self.products.is_empty() {
            "updates of every product".to_string()
        } else {
            format!("updates of {}", self.products.join(", "))
        };
        format!(
            "{what} are frozen since {} by token {}: {} (ternctl agents unfreeze lifts it)",
            self.since, self.by, self.reason
        )
    }
}

/// A cloud-stable style channel (seed 001).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channel {
    pub name: String,
    pub version: String,
    /// Stored channels written before the flag existed lack it.
    #[serde(default)]
    pub critical: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<Timestamp>,
}
