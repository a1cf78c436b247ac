//! Where a Service's backends are: `v1` Endpoints and `discovery.k8s.io/v1` EndpointSlice.

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;

use super::core::def;
use super::validate::{self, NameRule, required};
use super::{FnHooks, column, no_default, no_prepare, str_column, typed};
use crate::registry::ResourceDef;

/// `v1` Endpoints.
pub fn endpoints() -> ResourceDef {
    let mut d = def(
        "Endpoints",
        "endpoints",
        "endpoints",
        true,
        &["ep"],
        FnHooks::typed::<Endpoints>(no_default, |o, _| {
            validate::metadata(o, NameRule::Subdomain, true)
        }),
        vec![column(
            "Endpoints",
            "string",
            "Ready addresses and ports",
            false,
            |o| {
                let mut out = Vec::new();
                for s in o
                    .get("subsets")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let ports: Vec<i64> = s
                        .get("ports")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.get("port").and_then(Value::as_i64))
                        .collect();
                    for a in s
                        .get("addresses")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
                        for p in &ports {
                            out.push(format!("{ip}:{p}"));
                        }
                    }
                }
                Value::from(if out.is_empty() {
                    "<none>".to_string()
                } else {
                    out.join(",")
                })
            },
        )],
    );
    d.definition = "io.k8s.api.core.v1.Endpoints";
    d
}

/// `discovery.k8s.io/v1` EndpointSlice.
pub fn endpoint_slices() -> ResourceDef {
    let mut d = def(
        "EndpointSlice",
        "endpointslices",
        "endpointslice",
        true,
        &[],
        FnHooks {
            default: no_default,
            validate: |o, _| {
                let mut errs = validate::metadata(o, NameRule::Subdomain, true);
                if o.get("addressType").and_then(Value::as_str).is_none() {
                    errs.push(required("addressType"));
                }
                errs
            },
            check_types: typed::<EndpointSlice>,
            prepare_create: no_prepare,
        },
        vec![
            str_column("AddressType", "IPv4, IPv6 or FQDN", "/addressType"),
            column(
                "Endpoints",
                "string",
                "Addresses of the endpoints",
                false,
                |o| {
                    let addrs: Vec<&str> = o
                        .get("endpoints")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .flat_map(|e| {
                            e.get("addresses")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                        })
                        .filter_map(Value::as_str)
                        .collect();
                    Value::from(if addrs.is_empty() {
                        "<unset>".to_string()
                    } else {
                        addrs.join(",")
                    })
                },
            ),
        ],
    );
    d.group = "discovery.k8s.io";
    d.definition = "io.k8s.api.discovery.v1.EndpointSlice";
    d
}
