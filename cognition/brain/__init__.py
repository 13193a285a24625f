"""The built-in Cognition: a conversational brain that talks with an agent's owner, holds the
core.* tools, and is woken by the agent's signals.

- models.py — Conversation, Message, ConversationRun, BrainWake (registered in the cognition app)
- services.py — the service API (conversation_start, conversation_post_message,
  conversation_approve_skill, conversation_approve_run_action, brain_wake, brain_wake_handle)
- engine.py — one turn: prompt, trigger-filtered tools, the consent principal, limits
- prompts.py — the system prompt (<available_skills>, the pending question, the trigger)
- tasks.py — brain_wake_task; wiring.py — the brain hook; views.py / urls.py — the chat page
"""
