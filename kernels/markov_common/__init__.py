"""What the two Markov kernel families share and neither owns.

Both the sharded sampler and the fused draft loop build on these modules;
each family's own code lives in its own folder beside this one. Modules:
``arguments`` (the named groups of arguments the step kernel and the sharded
sampler's kernel take), ``head_tile`` (a BF16 head tile times eight
embeddings: the MMA chain both head kernels run) and ``probe`` (elementwise
probes of single ``kernels/ptx.py`` sequences, for checking the golden's
emulation and measuring the hardware reciprocal; its ``compile_variants``
is part of the compile gate). This package declares no flight-recorder
family. Importing it does not import CuTe DSL.
"""
