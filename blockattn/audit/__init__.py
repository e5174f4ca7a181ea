"""Claims audit: measure every statement of claims/claims.toml over several seeds and give a
verdict (confirmed / refuted / not runnable here). `blockattn audit` is the CLI front end."""
