"""Element types a schedule may use, with their sizes (DMA semaphores count bytes)."""

ITEMSIZE = {
    "float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "uint32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}


def itemsize(dtype: str) -> int:
    return ITEMSIZE[dtype]
