"""Views: App Home's tab and modals as pure functions, built where they are asked for (``bot.receive.listeners``).

The Home tab and the limits modal (``home``), the channel settings modal (``channel``) and the Home tab's
schedules (``schedules``): no I/O and no Slack
client; the listeners fetch, authorize and publish what these build.
"""
