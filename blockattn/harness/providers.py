# TEMPORARY (this session only, removed before landing): the registry moved to blockattn.providers.
from blockattn.providers import *  # noqa: F403
from blockattn.providers import Unsupported, all_providers, get, register, unregister  # noqa: F401
