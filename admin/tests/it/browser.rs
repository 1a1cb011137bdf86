//! The screen in a real headless Chromium, driven by chromedriver over the
//! W3C WebDriver HTTP API with reqwest. Needs Debian's `chromium` and
//! `chromium-driver`: under CI=true their absence fails the test; elsewhere
//! it is skipped with a note.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cmcp_registry::testing::TestDb;
use reqwest::header::{COOKIE, ORIGIN};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

use crate::screen::{admin_key, serve};
use crate::support::{connection, place, project, proposals, put, refresh};

both_backends!(admin_approves_three_proposals_in_a_real_browser,);

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn find_binary(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([
            PathBuf::from("/usr/bin"),
            PathBuf::from("/usr/lib/chromium"),
        ])
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// chromedriver and the browser, or `None` (skip) outside CI.
pub fn tools() -> Option<(PathBuf, PathBuf)> {
    let driver = find_binary(&["chromedriver"]);
    let browser = find_binary(&["chromium", "chromium-browser", "google-chrome"]);
    match (driver, browser) {
        (Some(d), Some(b)) => Some((d, b)),
        _ if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!(
                "CI=true but chromium/chromedriver are missing: apt-get install -y chromium chromium-driver"
            )
        }
        _ => {
            eprintln!("note: browser test skipped: install chromium and chromium-driver to run it");
            None
        }
    }
}

/// The chromedriver child; killed (by its own handle) on drop.
pub struct Driver {
    child: Child,
    base: String,
    http: Client,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Close the browser even when the test panicked (a plain blocking
        // DELETE), then stop the chromedriver we started.
        if !self.session.is_empty()
            && let Some(addr) = self.base.strip_prefix("http://")
            && let Ok(mut conn) = std::net::TcpStream::connect(addr)
        {
            use std::io::{Read, Write};
            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
            let req = format!(
                "DELETE /session/{} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n",
                self.session
            );
            let _ = conn.write_all(req.as_bytes());
            let _ = conn.read_to_end(&mut Vec::new());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn start(driver: &Path, browser: &Path) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let http = Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver {
        child,
        base,
        http,
        session: String::new(),
        _profile: profile,
    };
    // Readiness: chromedriver answers /status once it listens.
    let mut ready = false;
    for _ in 0..200 {
        if let Ok(r) = driver
            .http
            .get(format!("{}/status", driver.base))
            .send()
            .await
            && r.status().is_success()
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "chromedriver did not start");
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        &format!("--user-data-dir={}", driver._profile.path().display()),
    ];
    let caps = json!({"capabilities": {"alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {"binary": browser.display().to_string(), "args": args}
    }}});
    let resp: Value = driver
        .http
        .post(format!("{}/session", driver.base))
        .json(&caps)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    driver.session = resp["value"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {resp}"))
        .to_owned();
    // A form submit navigates; element lookups wait for the next page.
    driver
        .cmd(
            reqwest::Method::POST,
            "/timeouts",
            json!({"implicit": 15_000, "pageLoad": 30_000}),
        )
        .await;
    driver
}

impl Driver {
    pub async fn cmd(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut req = self.http.request(method, url);
        if !body.is_null() {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        resp.json::<Value>().await.unwrap()["value"].clone()
    }

    pub async fn go(&self, url: &str) {
        self.cmd(reqwest::Method::POST, "/url", json!({"url": url}))
            .await;
    }

    pub async fn find(&self, css: &str) -> String {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_owned()
    }

    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            json!({}),
        )
        .await;
    }

    pub async fn type_in(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            json!({"text": text}),
        )
        .await;
    }

    pub async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.cmd(
            reqwest::Method::GET,
            &format!("/element/{e}/text"),
            Value::Null,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    pub async fn cookie(&self, name: &str) -> String {
        let v = self
            .cmd(
                reqwest::Method::GET,
                &format!("/cookie/{name}"),
                Value::Null,
            )
            .await;
        v["value"]
            .as_str()
            .unwrap_or_else(|| panic!("no cookie {name}: {v}"))
            .to_owned()
    }
}

pub async fn admin_approves_three_proposals_in_a_real_browser(db: TestDb) {
    let Some((driver_bin, browser_bin)) = tools() else {
        return;
    };
    connection(&db.store, "bb").await;
    let mut projects: Vec<_> = (0..5)
        .map(|i| project(i, &format!("K{i}"), &format!("Project {i}")))
        .collect();
    projects.push(project(99, "XSS", "<script>alert(1)</script>"));
    put(&db.store, &projects).await;
    let places: Vec<_> = (0..5)
        .map(|i| {
            place(
                &format!("p{i}"),
                &format!("Place {i}"),
                Some(&format!("K{i}")),
            )
        })
        .collect();
    db.store.put_places(&places, "t").await.unwrap();
    refresh(&db.store).await;
    let open = proposals(&db.store, "proposed").await;
    let picked: Vec<i64> = open
        .iter()
        .filter(|p| p.place_id.is_some())
        .take(3)
        .map(|p| p.id)
        .collect();
    let xss = open
        .iter()
        .find(|p| p.space_name.starts_with('<'))
        .unwrap()
        .id;

    let srv = serve(&db).await;
    let key = admin_key(&db, &["mappings"]).await;
    let d = start(&driver_bin, &browser_bin).await;
    d.go(&format!("{}/admin", srv.base)).await;
    d.type_in("input[name=key]", &key).await;
    d.click("#sign-in").await;
    assert_eq!(
        d.text(&format!("label[for=p{xss}]")).await,
        "<script>alert(1)</script>",
        "the name is shown as text"
    );
    let alert = d
        .cmd(reqwest::Method::GET, "/alert/text", Value::Null)
        .await;
    assert_eq!(alert["error"], "no such alert", "a script ran: {alert}");
    for id in &picked {
        d.click(&format!("#p{id}")).await;
    }
    d.type_in("#reason", "keys equal").await;
    d.click("#approve-selected").await;
    assert!(d.text(".msg").await.contains("3 proposal(s): approve done"));
    d.go(&format!("{}/admin?view=decided", srv.base)).await;
    for id in &picked {
        let state = d
            .text(&format!("tr[data-proposal=\"{id}\"] td.state"))
            .await;
        assert!(state.starts_with("approved by screen admin"), "{state}");
    }
    assert_eq!(db.store.list_mappings().await.unwrap().len(), 3);

    // A forged cross-site POST riding on the browser's session is refused.
    let sid = d.cookie("cmcp_admin").await;
    let forged = reqwest::Client::new()
        .post(format!("{}/admin/decide", srv.base))
        .header(COOKIE, format!("cmcp_admin={sid}"))
        .header(ORIGIN, "https://attacker.example")
        .form(&[
            ("action", "reject"),
            ("id", &xss.to_string()),
            ("reason", "x"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(db.store.get_proposal(xss).await.unwrap().state, "proposed");
}
