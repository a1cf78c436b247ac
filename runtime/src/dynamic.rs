//! `kube::Resource` for objects whose type is known only at run time: the type is an
//! `ApiResource`, as `DynamicObject`'s is, and the object holds decoded metadata somewhere.

/// Implements `kube::Resource` for `$t`, an object of a kind named by an `ApiResource`
/// (like `kube::api::DynamicObject`), whose metadata `$o => $meta` reaches:
///
/// ```ignore
/// meridian_runtime::dynamic_resource!(Decoded, o => o.0.metadata);
/// ```
#[macro_export]
macro_rules! dynamic_resource {
    ($t:ty, $o:ident => $meta:expr) => {
        impl ::kube::Resource for $t {
            type DynamicType = ::kube::api::ApiResource;
            type Scope = ::kube::core::DynamicResourceScope;

            fn kind(dt: &::kube::api::ApiResource) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed(&dt.kind)
            }

            fn group(dt: &::kube::api::ApiResource) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed(&dt.group)
            }

            fn version(dt: &::kube::api::ApiResource) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed(&dt.version)
            }

            fn api_version(dt: &::kube::api::ApiResource) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed(&dt.api_version)
            }

            fn plural(dt: &::kube::api::ApiResource) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed(&dt.plural)
            }

            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                let $o = self;
                &$meta
            }

            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                let $o = self;
                &mut $meta
            }
        }
    };
}
