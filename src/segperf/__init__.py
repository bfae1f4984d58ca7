"""segperf: where does my training time go, and which optimization buys how much?"""

from segperf.config import register_resolvers, set_up_environment
from segperf.schema import register_schema

set_up_environment()  # before albumentations, torch and matplotlib are imported
register_resolvers()
register_schema()

__all__ = ["register_resolvers", "register_schema"]
