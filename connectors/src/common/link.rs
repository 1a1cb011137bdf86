//! `Link` header parsing (RFC 8288), for platforms that paginate by links.
//!
//! GitHub says to follow the `rel="next"` URL exactly as given and never to
//! build page URLs ourselves: the parameters differ by endpoint (`page`,
//! `cursor`, `since`, `before`/`after`) and may change. So the only thing the
//! listing code needs is "the next URL, if any", parsed robustly: several
//! `Link` headers, several links per header, several relation types per
//! link, quoted or bare parameters, and commas inside `<…>` or quotes.

use reqwest::header::{HeaderMap, LINK};
use url::Url;

/// One link of a `Link` header: the target as written and its relations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkValue {
    pub target: String,
    /// Lower-cased relation types (`rel="next last"` gives two).
    pub rels: Vec<String>,
}

/// Every link of every `Link` header in `headers`, in order.
pub fn links(headers: &HeaderMap) -> Vec<LinkValue> {
    headers
        .get_all(LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(parse_link_header)
        .collect()
}

/// The `rel="next"` target, resolved against the URL of the response that
/// carried it (a relative target is legal in RFC 8288).
pub fn next_url(headers: &HeaderMap, request_url: &Url) -> Option<Result<Url, url::ParseError>> {
    links(headers)
        .into_iter()
        .find(|l| l.rels.iter().any(|r| r == "next"))
        .map(|l| request_url.join(&l.target))
}

/// The `rel="last"` target, resolved like [`next_url`]. GitHub documents it
/// for page-numbered listings; knowing the last page lets pages 2..N be
/// fetched concurrently instead of one `next` at a time.
pub fn last_url(headers: &HeaderMap, request_url: &Url) -> Option<Result<Url, url::ParseError>> {
    links(headers)
        .into_iter()
        .find(|l| l.rels.iter().any(|r| r == "last"))
        .map(|l| request_url.join(&l.target))
}

/// The number in a URL's `page` query parameter, if it has exactly one.
pub fn page_number(url: &Url) -> Option<u32> {
    let mut pages = url.query_pairs().filter(|(k, _)| k == "page");
    let (_, value) = pages.next()?;
    if pages.next().is_some() {
        return None;
    }
    value.trim().parse().ok()
}

/// `url` with its `page` parameter set to `page`, every other parameter kept
/// in order: how pages 2..N are built from the `rel="last"` URL.
pub fn with_page(url: &Url, page: u32) -> Url {
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut out = url.clone();
    {
        let mut q = out.query_pairs_mut();
        q.clear();
        for (k, v) in &pairs {
            if k == "page" {
                q.append_pair(k, &page.to_string());
            } else {
                q.append_pair(k, v);
            }
        }
    }
    out
}

/// Parses one header value: `<url>; rel="next", <url>; rel="last"`.
/// Malformed links are skipped rather than failing the whole header.
pub fn parse_link_header(value: &str) -> Vec<LinkValue> {
    let mut out = Vec::new();
    let mut rest = value;
    loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        let Some(after_lt) = rest.strip_prefix('<') else {
            // Not at a link start: skip to the next comma outside quotes.
            match skip_to_comma(rest) {
                Some(next) => {
                    rest = next;
                    continue;
                }
                None => break,
            }
        };
        let Some(end) = after_lt.find('>') else { break };
        let target = after_lt[..end].trim().to_owned();
        rest = &after_lt[end + 1..];
        let (params, next) = split_params(rest);
        rest = next;
        let rels = params
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("rel"))
            .take(1) // RFC 8288: only the first rel parameter counts
            .flat_map(|(_, v)| v.split_whitespace().map(str::to_ascii_lowercase))
            .collect();
        out.push(LinkValue { target, rels });
        if rest.is_empty() {
            break;
        }
    }
    out
}

/// Reads `; key=value; key="quoted, value"` up to the comma that ends this
/// link; returns the parameters and the text after that comma.
fn split_params(mut s: &str) -> (Vec<(String, String)>, &str) {
    let mut params = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix(';') {
            s = after.trim_start();
            let key_end = s.find(['=', ';', ',']).unwrap_or(s.len());
            let key = s[..key_end].trim().to_owned();
            s = &s[key_end..];
            let mut value = String::new();
            if let Some(after_eq) = s.strip_prefix('=') {
                let v = after_eq.trim_start();
                if let Some(quoted) = v.strip_prefix('"') {
                    let (text, consumed) = read_quoted(quoted);
                    value = text;
                    s = &quoted[consumed..];
                } else {
                    let end = v.find([';', ',']).unwrap_or(v.len());
                    value = v[..end].trim().to_owned();
                    s = &v[end..];
                }
            }
            if !key.is_empty() {
                params.push((key, value));
            }
        } else if let Some(after) = s.strip_prefix(',') {
            return (params, after);
        } else if s.is_empty() {
            return (params, s);
        } else {
            // Junk between parameters: skip to the next separator.
            let end = s.find([';', ',']).unwrap_or(s.len());
            s = &s[end..];
        }
    }
}

/// Reads a quoted string body (after the opening quote) with `\` escapes;
/// returns the text and how many bytes were consumed including the closing
/// quote (or everything when it is missing).
fn read_quoted(s: &str) -> (String, usize) {
    let mut text = String::new();
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            text.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '"' {
            return (text, i + 1);
        } else {
            text.push(c);
        }
    }
    (text, s.len())
}

fn skip_to_comma(s: &str) -> Option<&str> {
    let mut in_quotes = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => in_quotes = !in_quotes,
            ',' if !in_quotes => return Some(&s[i + 1..]),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_page_is_read_and_page_urls_are_built_from_it() {
        let mut h = HeaderMap::new();
        h.insert(
            LINK,
            "<https://api.github.com/orgs/acme/repos?per_page=100&type=all&page=2>; rel=\"next\", \
             <https://api.github.com/orgs/acme/repos?per_page=100&type=all&page=7>; rel=\"last\""
                .parse()
                .unwrap(),
        );
        let base = Url::parse("https://api.github.com/orgs/acme/repos?per_page=100").unwrap();
        let last = last_url(&h, &base).unwrap().unwrap();
        assert_eq!(page_number(&last), Some(7));
        assert_eq!(
            with_page(&last, 3).as_str(),
            "https://api.github.com/orgs/acme/repos?per_page=100&type=all&page=3"
        );
        assert_eq!(last_url(&HeaderMap::new(), &base), None);
        let twice = Url::parse("https://x/r?page=2&page=3").unwrap();
        assert_eq!(page_number(&twice), None);
        assert_eq!(page_number(&base), None);
    }
    use reqwest::header::HeaderValue;

    /// The `link` header of page 2 of GitHub's recorded pagination scenario
    /// (octokit/fixtures paginate-issues, see shared samples).
    const RECORDED_PAGE_2: &str = "<https://api.github.com/repositories/1000/issues?per_page=3&page=1>; rel=\"prev\", <https://api.github.com/repositories/1000/issues?per_page=3&page=3>; rel=\"next\", <https://api.github.com/repositories/1000/issues?per_page=3&page=5>; rel=\"last\", <https://api.github.com/repositories/1000/issues?per_page=3&page=1>; rel=\"first\"";
    /// The last page: no next, no last.
    const RECORDED_PAGE_5: &str = "<https://api.github.com/repositories/1000/issues?per_page=3&page=4>; rel=\"prev\", <https://api.github.com/repositories/1000/issues?per_page=3&page=1>; rel=\"first\"";

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(LINK, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn base() -> Url {
        Url::parse("https://api.github.com/orgs/acme/repos?per_page=100").unwrap()
    }

    #[test]
    fn recorded_github_header_gives_every_relation() {
        let links = parse_link_header(RECORDED_PAGE_2);
        let rels: Vec<_> = links.iter().map(|l| l.rels.join(" ")).collect();
        assert_eq!(rels, ["prev", "next", "last", "first"]);
        let next = next_url(&headers(&[RECORDED_PAGE_2]), &base())
            .unwrap()
            .unwrap();
        assert_eq!(
            next.as_str(),
            "https://api.github.com/repositories/1000/issues?per_page=3&page=3"
        );
    }

    #[test]
    fn last_page_has_no_next() {
        assert!(next_url(&headers(&[RECORDED_PAGE_5]), &base()).is_none());
        assert!(next_url(&HeaderMap::new(), &base()).is_none());
    }

    #[test]
    fn several_headers_bare_params_and_multiple_rels() {
        let h = headers(&[
            "<https://x.test/a?page=9>; rel=last",
            "<https://x.test/a?cursor=Y2I6MTA%3D&b=1>; title=\"a, b; c\"; REL=\"Next Prev\"",
        ]);
        let next = next_url(&h, &base()).unwrap().unwrap();
        assert_eq!(next.as_str(), "https://x.test/a?cursor=Y2I6MTA%3D&b=1");
        let all = links(&h);
        assert_eq!(all[1].rels, ["next", "prev"]);
    }

    #[test]
    fn commas_inside_the_url_do_not_split_links() {
        let l = parse_link_header("<https://x.test/a?ids=1,2,3>; rel=\"next\"");
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].target, "https://x.test/a?ids=1,2,3");
    }

    #[test]
    fn relative_targets_resolve_against_the_request() {
        let h = headers(&["</orgs/acme/repos?page=2>; rel=\"next\""]);
        let next = next_url(&h, &base()).unwrap().unwrap();
        assert_eq!(
            next.as_str(),
            "https://api.github.com/orgs/acme/repos?page=2"
        );
    }

    #[test]
    fn malformed_links_are_skipped() {
        let l = parse_link_header("garbage, <https://x.test/2>; rel=\"next\", <unterminated");
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].rels, ["next"]);
        assert!(parse_link_header("").is_empty());
    }
}
