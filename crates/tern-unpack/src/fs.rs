//! The file operations of an unpack are tern-fs's (the same rules as tern-update's own
//! file writes: directories with `DIR_MODE`, files with their mode set explicitly
//! whatever the umask, everything fsynced), with the errors folded into this crate's.

pub(crate) use tern_fs::{
    create_dir, create_dir_all, create_file, free_space, fsync_dir, parent_of,
    remove_dir_all_if_exists, temp_beside,
};

impl From<tern_fs::Error> for crate::error::Error {
    fn from(e: tern_fs::Error) -> Self {
        Self::io(format!("{} {}", e.what, e.path.display()), e.source)
    }
}
