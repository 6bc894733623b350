"""Layer 4, agents: tools, the function-calling loop, budgets and traces.

Agents are YAML (a chat model endpoint, instructions, built-in tools, budgets) stored in the
metadata DB; each run's model and tool calls are stored as its trace.
"""

from __future__ import annotations

from aifab.agents.chat import ChatModel, ChatReply, ModelCallError, OpenAIChat, ToolCall
from aifab.agents.loop import LoopResult, Step, run_loop
from aifab.agents.service import (
    build_tools,
    create_agent,
    delete_agent,
    get_agent,
    get_trace,
    list_agents,
    list_runs,
    parse_spec,
    run_agent,
    step_dict,
)
from aifab.agents.spec import AgentSpec, Budgets, ModelEndpoint, ToolSpec
from aifab.agents.tool_eval import evaluate_tool_calls
from aifab.agents.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolContext,
    ToolError,
    check_arguments,
    tool_from_function,
)

__all__ = [
    "BUILTIN_TOOLS",
    "AgentSpec",
    "Budgets",
    "ChatModel",
    "ChatReply",
    "LoopResult",
    "ModelCallError",
    "ModelEndpoint",
    "OpenAIChat",
    "Step",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolSpec",
    "build_tools",
    "check_arguments",
    "create_agent",
    "delete_agent",
    "evaluate_tool_calls",
    "get_agent",
    "get_trace",
    "list_agents",
    "list_runs",
    "parse_spec",
    "run_agent",
    "run_loop",
    "step_dict",
    "tool_from_function",
]
