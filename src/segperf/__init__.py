"""segperf: where does my training time go, and which optimization buys how much?"""

from segperf.config import register_resolvers, route_tool_caches
from segperf.schema import register_schema

route_tool_caches()  # before torch / matplotlib read where to cache
register_resolvers()
register_schema()

__all__ = ["register_resolvers", "register_schema"]
