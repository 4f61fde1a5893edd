"""The built-in autoscaler: signals from the routers, a pure decision, the scale write."""
