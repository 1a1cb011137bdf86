//! The API's way to link a person's GitHub: the worker's `link_github`, the
//! same function `people link-github` calls, behind the admin crate's
//! [`GithubLinker`].

use cmcp_admin::people::{GithubLinker, LinkFailure, LinkedAccount};
use cmcp_connectors::HttpConfig;
use cmcp_domain::{Platform, Token};
use cmcp_registry::{Cipher, Store};
use cmcp_worker::people::{DEFAULT_GITHUB_API, LinkGithub, callers_mistake, link_github};

pub struct WorkerLinker {
    pub store: Store,
    pub cipher: Cipher,
    pub http: HttpConfig,
}

#[async_trait::async_trait]
impl GithubLinker for WorkerLinker {
    async fn link(
        &self,
        person: &str,
        token: Token,
        base_url: Option<String>,
        actor: &str,
    ) -> Result<LinkedAccount, LinkFailure> {
        let base_url = base_url.unwrap_or_else(|| DEFAULT_GITHUB_API.to_owned());
        let link = LinkGithub {
            person: person.to_owned(),
            token,
            base_url: base_url.clone(),
            actor: actor.to_owned(),
        };
        match link_github(&self.store, &self.cipher, self.http.clone(), link).await {
            Ok(l) => Ok(LinkedAccount {
                connection_id: l.connection_id,
                person: l.person,
                platform: Platform::Github.to_string(),
                login: l.login,
                base_url,
                risks: l.risks,
            }),
            Err(e) if callers_mistake(&e) => Err(LinkFailure::Rejected(e.to_string())),
            Err(e) => Err(LinkFailure::Internal(e.to_string())),
        }
    }
}
