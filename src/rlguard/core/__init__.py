"""The shapes every room speaks: the alert, the decision, the verdict, the incident, the
checkpoint to keep, the error hierarchy and number formatting (stdlib only)."""
