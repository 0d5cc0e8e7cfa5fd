#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Prints bindgen --blocklist-* options for every item the kernel's own bindings already define,
# so rrxe's generated bindings reuse `kernel::bindings` instead of duplicating it.  Left out:
#  - anonymous `_bindgen_ty_N` names (their numbering differs between the two runs);
#  - bindgen's helper types;
#  - placeholder structs (bodies that are only `_unused: [u8; 0]` or `_address: u8`): the kernel
#    crate has no real definition for those (net_device, sock, ...), so we generate our own.
objtree=$1
for f in "$objtree/rust/bindings/bindings_generated.rs" \
         "$objtree/rust/bindings/bindings_helpers_generated.rs"; do
	[ -f "$f" ] && cat "$f"
done | awk '
function emit(kind, name) {
	if (name ~ /^_bindgen_ty_[0-9]+$/ || name ~ /^__Bindgen/ || name ~ /^__IncompleteArrayField$/ ||
	    name ~ /^__BindgenUnionField$/) return
	if (seen[kind, name]++) return
	printf "--blocklist-%s ^%s$\n", kind, name
}
/^pub struct [A-Za-z_0-9]+ \{$/ || /^pub union [A-Za-z_0-9]+ \{$/ {
	name = $3; body = ""; inbody = 1; next
}
inbody {
	if ($0 ~ /^}/) {
		inbody = 0
		if (body !~ /^ *(pub )?_unused: \[u8; 0\],? *$/ && body !~ /^ *(pub )?_address: u8,? *$/)
			emit("type", name)
	} else {
		body = body $0
	}
	next
}
/^pub type [A-Za-z_0-9]+ =/ { emit("type", $3) ; next }
/^pub const [A-Za-z_0-9]+:/ { n = $3; sub(/:$/, "", n); emit("var", n); next }
/^pub static (mut )?[A-Za-z_0-9]+:/ { n = ($3 == "mut") ? $4 : $3; sub(/:$/, "", n); emit("var", n); next }
/^ *pub fn [A-Za-z_0-9]+\(/ { n = $0; sub(/^ *pub fn /, "", n); sub(/\(.*/, "", n); emit("function", n); next }
/^pub enum [A-Za-z_0-9]+ \{/ { emit("type", $3); next }
'
