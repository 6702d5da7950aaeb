"""The accuracy report: assembly from the tables, plots, and rendering from templates."""
