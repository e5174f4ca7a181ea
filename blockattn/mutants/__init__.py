"""Mutation testing: planted bugs (`catalog`) applied to copies of the package, each judged by the
quick tier of the suite in a subprocess (`worker`). `blockattn mutants` is the CLI front end."""
