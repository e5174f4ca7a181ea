"""Claims audit: measure every statement of claims/claims.toml over several seeds, on the kernel
the claim names, and give a verdict (confirmed / refuted / not runnable here), with blockattn's
standing on claims about other kernels and the verdict's sensitivity to the measure (FP64 oracle
vs FP32 reference), the seed and the input distribution. `blockattn audit` is the CLI front end."""
