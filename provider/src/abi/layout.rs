//! Layout checking machinery for `layout_v44.rs`.

/// Expected (from the rdma-core v44 headers) and actual (from the Rust declarations) layout of
/// one structure.
#[derive(Debug)]
pub struct StructLayout {
    pub c_name: &'static str,
    pub size: usize,
    pub align: usize,
    pub actual_size: usize,
    pub actual_align: usize,
    pub fields: &'static [FieldLayout],
}

/// Expected and actual offset and size of one field.
#[derive(Debug)]
pub struct FieldLayout {
    pub c_name: &'static str,
    pub offset: usize,
    pub size: usize,
    pub actual_offset: usize,
    pub actual_size: usize,
}

/// `size_of` the field `$t.$path`, usable in constants.
macro_rules! field_size {
    ($t:ty, $($f:ident).+) => {{
        const fn size_of_pointee<T>(_: *const T) -> usize {
            ::core::mem::size_of::<T>()
        }
        let u = ::core::mem::MaybeUninit::<$t>::uninit();
        let p = u.as_ptr();
        // SAFETY: this only computes the address of a field of a local (uninitialised) value;
        // nothing is read, and the place stays inside the allocation of `u`.
        size_of_pointee(unsafe { &raw const (*p).$($f).+ })
    }};
}
pub(crate) use field_size;

/// Turns a layout table into compile-time assertions (the build fails on any difference,
/// naming the structure and field) and into `LAYOUT`, which the unit tests walk.
macro_rules! layout_table {
    ($( $cname:literal => $ty:ty, size $size:literal, align $align:literal {
        $( $fname:literal => $($f:ident).+ @ $off:literal : $fsize:literal ),* $(,)?
    } )*) => {
        const _: () = {
            $(
                assert!(::core::mem::size_of::<$ty>() == $size, concat!("size of ", $cname));
                assert!(::core::mem::align_of::<$ty>() == $align, concat!("align of ", $cname));
                $(
                    assert!(::core::mem::offset_of!($ty, $($f).+) == $off,
                            concat!("offset of ", $cname, ".", $fname));
                    assert!(field_size!($ty, $($f).+) == $fsize,
                            concat!("size of ", $cname, ".", $fname));
                )*
            )*
        };

        /// Every checked structure, in the order of `layout_x86_64_v44.txt`.
        pub const LAYOUT: &[super::layout::StructLayout] = &[$(
            super::layout::StructLayout {
                c_name: $cname,
                size: $size,
                align: $align,
                actual_size: ::core::mem::size_of::<$ty>(),
                actual_align: ::core::mem::align_of::<$ty>(),
                fields: &[$(
                    super::layout::FieldLayout {
                        c_name: $fname,
                        offset: $off,
                        size: $fsize,
                        actual_offset: ::core::mem::offset_of!($ty, $($f).+),
                        actual_size: field_size!($ty, $($f).+),
                    },
                )*],
            },
        )*];
    };
}
pub(crate) use layout_table;
