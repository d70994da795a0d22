"""The symmetric wing: programs every device of which runs device 0's events moved by a
group element (`program.SymmetricProgram`), and the analyses written for them.

Only the front ends that prove the symmetry make one (`verify.rotation.rotation_unroll`,
`verify.xor.xor_unroll`, `pallas.program.Builder.program` after `interpret.Lanes`); the
verifier core reaches the wing only through `core.OnQuotient`. A `verify.events.Program`
is never symmetric: its `devices` holds every device's events it describes.
"""
