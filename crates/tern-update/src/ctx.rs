//! What every step of a namespace's run is given (`Ctx`: its layout, the client of ternd
//! and of artifact servers, its settings), and the save of its `update.yaml`.

use crate::error::Result;
use crate::layout::Layout;
use crate::settings::Settings;
use crate::state::{self, UpdateFile};
use tern_client::Client;

pub struct Ctx {
    pub layout: Layout,
    pub http: Client,
    /// Replace links and files tern-update does not manage (`enable --overwrite`).
    pub overwrite: bool,
    /// What this run was given or `enable` saved, with the layout's dirs filled in
    /// (what `enable` saves). Heartbeats name the host by `hostname` and `host_id`;
    /// `None`: the kernel's node name and `/etc/machine-id`.
    pub settings: Settings,
}

/// Saves the namespace's `update.yaml` (replaced whole, so a reader sees the old file
/// or the new one).
pub(crate) fn save(ctx: &Ctx, file: &UpdateFile) -> Result<()> {
    state::save(&ctx.layout.update_yaml(), file)
}
