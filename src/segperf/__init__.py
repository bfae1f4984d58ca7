"""segperf: where does my training time go, and which optimization buys how much?"""

from segperf.config import register_resolvers

register_resolvers()

__all__ = ["register_resolvers"]
