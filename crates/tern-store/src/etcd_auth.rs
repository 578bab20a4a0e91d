//! etcd users and roles named in store terms (cargo feature `etcd`): who may read and
//! write which store keys and leader leases. The store's layout (`PREFIX kv/KEY`,
//! `PREFIX lease/NAME`) stays this crate's business; callers name keys and lease names as
//! they use them.
//!
//! etcd checks permissions per request: a range read or a watch needs read on the whole
//! range, a put or a delete write on the key, a transaction read on every compared key
//! and the permissions of its operations, revoking an etcd lease write on every key
//! attached to it. Managing users and roles, and enabling authentication, need the `root`
//! role.

use std::future::Future;

use etcd_client::{Permission, PermissionType};

use crate::etcd::map_err;
use crate::{Error, EtcdStore, Result, prefix_end};

/// A range of store keys or leader leases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdRange {
    /// One store key.
    Key(String),
    /// Every store key starting with this.
    Prefix(String),
    /// One leader lease (by the name given to `lease_acquire`).
    Lease(String),
    /// Every leader lease whose name starts with this (`""`: all of them).
    LeasePrefix(String),
}

/// One permission of a role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdGrant {
    pub range: EtcdRange,
    /// Read and write; otherwise read only.
    pub write: bool,
}

impl EtcdGrant {
    pub fn read(range: EtcdRange) -> Self {
        EtcdGrant {
            range,
            write: false,
        }
    }

    pub fn read_write(range: EtcdRange) -> Self {
        EtcdGrant { range, write: true }
    }
}

fn is_absent(e: &etcd_client::Error) -> bool {
    e.to_string().contains("not found")
}

fn is_present(e: &etcd_client::Error) -> bool {
    e.to_string().contains("already exists")
}

fn check_role_user(name: &str) -> Result<()> {
    if name.is_empty() || name == "root" {
        return Err(Error::InvalidArgument(format!(
            "{name:?} cannot be a role user (empty, or etcd's root)"
        )));
    }
    Ok(())
}

impl EtcdStore {
    /// One auth request under the request deadline.
    async fn auth_call<T>(
        &self,
        what: impl Fn() -> String,
        fut: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<std::result::Result<T, etcd_client::Error>> {
        tokio::time::timeout(self.opts.request_timeout, fut)
            .await
            .map_err(|_| {
                Error::Unavailable(format!(
                    "{}: etcd did not answer within {:?}",
                    what(),
                    self.opts.request_timeout
                ))
            })
    }

    fn etcd_range(&self, range: &EtcdRange) -> (Vec<u8>, Option<Vec<u8>>) {
        let (key, prefix) = match range {
            EtcdRange::Key(k) => (self.kv_key(k), false),
            EtcdRange::Prefix(p) => (self.kv_key(p), true),
            EtcdRange::Lease(n) => (self.lease_key(n), false),
            EtcdRange::LeasePrefix(p) => (self.lease_key(p), true),
        };
        let key = key.into_bytes();
        let end = prefix.then(|| prefix_end(&key).unwrap_or_else(|| vec![0]));
        (key, end)
    }

    /// Creates (or re-creates) the user `name` with `password` and a role of the same
    /// name holding exactly `grants` (see [`EtcdStore::set_role`]). An existing user of
    /// that name is replaced, so the grants are never more than asked.
    pub async fn set_user(&self, name: &str, password: &str, grants: &[EtcdGrant]) -> Result<()> {
        check_role_user(name)?;
        let (_, client) = self.clients.pick();
        let mut auth = client.auth_client();
        let what = |w: &str| format!("{w} etcd user {name:?}");
        match self
            .auth_call(|| what("removing the old"), auth.user_delete(name))
            .await?
        {
            Ok(_) => {}
            Err(e) if is_absent(&e) => {}
            Err(e) => return Err(map_err(&what("removing the old"), e)),
        }
        self.auth_call(|| what("adding"), auth.user_add(name, password, None))
            .await?
            .map_err(|e| map_err(&what("adding"), e))?;
        self.set_role(name, grants).await
    }

    /// Replaces the role `name` with one holding exactly `grants`, plus read of the
    /// store's root key (which a connection reads to check etcd answers), and grants it
    /// to the user `name`, which must exist; its password is kept. What the role held
    /// before and `grants` do not is revoked.
    pub async fn set_role(&self, name: &str, grants: &[EtcdGrant]) -> Result<()> {
        check_role_user(name)?;
        let (_, client) = self.clients.pick();
        let mut auth = client.auth_client();
        let what = |w: &str| format!("{w} etcd user {name:?}");
        match self
            .auth_call(|| what("removing the old role of"), auth.role_delete(name))
            .await?
        {
            Ok(_) => {}
            Err(e) if is_absent(&e) => {}
            Err(e) => return Err(map_err(&what("removing the old role of"), e)),
        }
        self.auth_call(|| what("adding the role of"), auth.role_add(name))
            .await?
            .map_err(|e| map_err(&what("adding the role of"), e))?;
        let root = self.kv_key("").into_bytes();
        let mut perms = vec![Permission::read(root)];
        for g in grants {
            let (key, end) = self.etcd_range(&g.range);
            let kind = if g.write {
                PermissionType::Readwrite
            } else {
                PermissionType::Read
            };
            let mut p = Permission::new(kind, key);
            if let Some(end) = end {
                p = p.with_range_end(end);
            }
            perms.push(p);
        }
        for p in perms {
            let w = || what("granting a permission to the role of");
            self.auth_call(w, auth.role_grant_permission(name, p))
                .await?
                .map_err(|e| map_err(&w(), e))?;
        }
        let w = || what("granting its role to");
        self.auth_call(w, auth.user_grant_role(name, name))
            .await?
            .map_err(|e| map_err(&w(), e))?;
        Ok(())
    }

    /// Removes the user `name` and its role; false when there was no such user.
    pub async fn remove_user(&self, name: &str) -> Result<bool> {
        let (_, client) = self.clients.pick();
        let mut auth = client.auth_client();
        let what = || format!("removing etcd user {name:?}");
        let existed = match self.auth_call(what, auth.user_delete(name)).await? {
            Ok(_) => true,
            Err(e) if is_absent(&e) => false,
            Err(e) => return Err(map_err(&what(), e)),
        };
        let what = || format!("removing etcd role {name:?}");
        match self.auth_call(what, auth.role_delete(name)).await? {
            Ok(_) => {}
            Err(e) if is_absent(&e) => {}
            Err(e) => return Err(map_err(&format!("removing etcd role {name:?}"), e)),
        }
        Ok(existed)
    }

    /// Turns etcd's authentication on: creates the `root` user with `root_password` (etcd
    /// requires it) unless it exists, gives it the `root` role, and enables
    /// authentication. From then on every client needs credentials.
    pub async fn enable_auth(&self, root_password: &str) -> Result<()> {
        let (_, client) = self.clients.pick();
        let mut auth = client.auth_client();
        let what = || "adding etcd user root".to_string();
        match self
            .auth_call(what, auth.user_add("root", root_password, None))
            .await?
        {
            Ok(_) => {}
            Err(e) if is_present(&e) => {}
            Err(e) => return Err(map_err(&what(), e)),
        }
        let what = || "granting etcd's root role to user root".to_string();
        self.auth_call(what, auth.user_grant_role("root", "root"))
            .await?
            .map_err(|e| map_err(&what(), e))?;
        let what = || "enabling etcd's authentication".to_string();
        self.auth_call(what, auth.auth_enable())
            .await?
            .map_err(|e| map_err(&what(), e))?;
        Ok(())
    }
}
