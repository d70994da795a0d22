"""Element types a schedule may use, with their sizes (DMA semaphores count bytes)."""

ITEMSIZE = {
    "float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "uint32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}


def itemsize(dtype: str) -> int:
    return ITEMSIZE[dtype]


def tiled_shape(shape: tuple[int, ...], size: int) -> tuple[int, ...]:
    """`shape` as a TPU lays out an array of `size`-byte elements in memory (Mosaic's memref
    layout in VMEM, XLA's in HBM): the last dim padded to whole 128 lanes, the one before to
    whole tiles of 8 rows of 32 bits (16 of bf16, 32 of int8), or, where it has fewer rows
    than that, to the power of 2 that holds them."""
    dims = list(shape)
    if dims:
        dims[-1] = -(-dims[-1] // 128) * 128
        if len(dims) >= 2:
            tile = 8 * max(1, 4 // size)
            if dims[-2] < tile:
                tile = 1 << max(0, dims[-2] - 1).bit_length()
            dims[-2] = -(-dims[-2] // tile) * tile
    return tuple(dims)
