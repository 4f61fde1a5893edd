"""What Pagoda ships for watching it: the table of exported metrics and the alert rules."""
