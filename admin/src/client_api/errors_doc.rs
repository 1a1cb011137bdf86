//! Every error answer of the `/v1` API is `{"error": "…"}` (see
//! [`crate::error`]). Routes list their error statuses with a description
//! only; this gives each of them that one documented body, so the shape is
//! in the OpenAPI document for every route, old and new. Any route can fail
//! inside: each gets a documented 500, and a 503 (with `Retry-After`) for a
//! store that is unreachable or has no free connection in time.

use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::{OpenApi, Ref, RefOr, ResponseBuilder};
use utoipa::{PartialSchema, ToSchema};

use super::wire::ErrorBody;

fn operations(doc: &mut OpenApi) -> impl Iterator<Item = &mut Operation> {
    doc.paths.paths.values_mut().flat_map(|p| {
        [
            p.get.as_mut(),
            p.put.as_mut(),
            p.post.as_mut(),
            p.delete.as_mut(),
            p.patch.as_mut(),
        ]
        .into_iter()
        .flatten()
    })
}

/// Attach the error body to every 4xx and 5xx answer that has none, and a
/// 500 and a 503 to every route.
pub fn document_errors(doc: &mut OpenApi) {
    let name = ErrorBody::name().to_string();
    doc.components
        .get_or_insert_with(Default::default)
        .schemas
        .entry(name.clone())
        .or_insert_with(ErrorBody::schema);
    let body = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(&name)))
        .build();
    for op in operations(doc) {
        op.responses
            .responses
            .entry("500".to_owned())
            .or_insert_with(|| {
                ResponseBuilder::new()
                    .description("Internal error; the details are logged, never answered")
                    .into()
            });
        op.responses
            .responses
            .entry("503".to_owned())
            .or_insert_with(|| {
                ResponseBuilder::new()
                    .description(
                        "The registry is busy (no free connection in time) or unreachable; \
                         try again after `Retry-After` seconds",
                    )
                    .into()
            });
        for (status, response) in op.responses.responses.iter_mut() {
            let is_error = status.starts_with('4') || status.starts_with('5');
            if let (true, RefOr::T(r)) = (is_error, response)
                && r.content.is_empty()
            {
                r.content
                    .insert("application/json".to_owned(), RefOr::T(body.clone()));
            }
        }
    }
}
