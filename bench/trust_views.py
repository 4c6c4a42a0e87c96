"""The tables of ``bench_trust.py`` (issue #21) and their two-view splits, declared before any
mining result was looked at.

mammals and asia keep the splits of ``bench_serenade.py`` (BASELINES.md §1). The weak-structure
health tables are built here from ``/work/shared/data`` (README §4), deterministically, with
their missing values kept (written as empty cells, which the server reads as missing): the
benchmark checks that printed queries hold exactly the measured rows *with* missing values.

Each split puts what a patient or respondent *is* (demographics, history, context) on the left
and what was *measured or happened* (measurements, course, outcome) on the right, so that a
redescription reads as "this kind of person ⇔ this clinical picture". No split was tuned: none
was changed after seeing a result.

``HELD_OUT_TABLES`` (titanic, adult) were added on 2026-11-27, their splits committed before
any miner ran on them, as tables the defaults were never looked at on; they are not health
tables and are run only when named (``--tables titanic,adult``).

Every builder returns a frame of strings with an ``id`` column (row number from 1) and the
columns of both views; :func:`write_pair` writes the two CSVs that ``bench_serenade``'s
``prepare_dataset`` trims and proposes metadata for.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

__all__ = ["HELD_OUT_TABLES", "WEAK_TABLES", "TableSpec", "write_pair"]

MISSING = ""


@dataclass(frozen=True)
class TableSpec:
    """A weak-structure table: how to build it, its two views and why they are split so."""

    key: str
    title: str
    build: Callable[[Path], pd.DataFrame]
    left: tuple[str, ...]
    right: tuple[str, ...]
    rationale: str


def _strings(frame: pd.DataFrame) -> pd.DataFrame:
    """Every cell as text, missing (NaN/None) as an empty cell; ``id`` = 1..n first."""
    out = frame.reset_index(drop=True).copy()
    for column in out.columns:
        values = out[column]
        out[column] = [MISSING if _is_missing(v) else _text(v) for v in values]
    out.insert(0, "id", [str(i) for i in range(1, len(out) + 1)])
    return out


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _text(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


# -- kaggle_stroke (5,110 rows) ------------------------------------------------------------------


def build_stroke(root: Path) -> pd.DataFrame:
    """The Kaggle stroke table; ``N/A`` (bmi) and ``Unknown`` (smoking status) are missing."""
    raw = pd.read_csv(
        root / "kaggle_stroke" / "healthcare-dataset-stroke-data.csv", dtype=str, na_filter=False
    )
    raw = raw.drop(columns="id")
    raw["bmi"] = raw["bmi"].where(raw["bmi"] != "N/A")
    raw["smoking_status"] = raw["smoking_status"].where(raw["smoking_status"] != "Unknown")
    return _strings(raw)


# -- uci_heart_disease (4 sites, 920 rows) -------------------------------------------------------

_HEART_SITES = ("cleveland", "hungarian", "switzerland", "va_longbeach")


def build_heart(root: Path) -> pd.DataFrame:
    """The four processed UCI heart-disease sites stacked, with a ``site`` column; ``?`` is
    missing, and so is a cholesterol of 0 (Switzerland's code for not measured)."""
    frames = []
    for site in _HEART_SITES:
        frame = pd.read_csv(root / "uci_heart_disease" / f"{site}.csv", dtype=str, na_filter=False)
        frame.insert(0, "site", site)
        frames.append(frame)
    raw = pd.concat(frames, ignore_index=True)
    raw = raw.where(raw != "?")
    numbers = raw.drop(columns="site").apply(pd.to_numeric)
    numbers["chol"] = numbers["chol"].where(numbers["chol"] != 0)
    numbers["diagnosed"] = (numbers["num"] > 0).astype(float).where(numbers["num"].notna())
    numbers = numbers.drop(columns="num")
    numbers.insert(0, "site", raw["site"])
    return _strings(numbers)


# -- pima_diabetes (768 rows) --------------------------------------------------------------------

_PIMA_ZERO_IS_MISSING = ("Glucose", "BloodPressure", "SkinThickness", "Insulin", "BMI")


def build_pima(root: Path) -> pd.DataFrame:
    """Pima diabetes; a 0 in glucose, blood pressure, skin thickness, insulin or BMI is the
    documented code for a missing measurement (README §4)."""
    raw = pd.read_csv(root / "pima_diabetes" / "diabetes.csv")
    for column in _PIMA_ZERO_IS_MISSING:
        raw[column] = raw[column].where(raw[column] != 0)
    raw["Outcome"] = raw["Outcome"].astype(float)
    return _strings(raw.astype(float))


# -- mimic3_demo: one row per hospital admission (129 rows) --------------------------------------

_ETHNICITY_GROUPS = ("WHITE", "BLACK", "HISPANIC", "ASIAN")
_ETHNICITY_UNKNOWN = ("UNKNOWN/NOT SPECIFIED", "UNABLE TO OBTAIN", "PATIENT DECLINED TO ANSWER")


def _short_time(text: str) -> datetime:
    """``M/D/YY H:MM`` (the demo's reformatted dates: the century is lost) or, for a few birth
    dates, ``YYYY-MM-DD HH:MM:SS``."""
    if "/" in text:
        return datetime.strptime(text, "%m/%d/%y %H:%M")
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")


def _ethnicity(value: str) -> str | None:
    if value in _ETHNICITY_UNKNOWN:
        return None
    for group in _ETHNICITY_GROUPS:
        if value.startswith(group):
            return group.lower()
    return "other"


def _known(value: str) -> str | None:
    """Empty and ``UNKNOWN (DEFAULT)`` are missing."""
    return None if value in ("", "UNKNOWN (DEFAULT)") else value


def _age_group(admitted: str, born: str) -> str | None:
    """From two-digit years only (the demo lost the century): (admission year − birth year)
    mod 100. Patients over 89 have their birth date shifted 300 years back in MIMIC-III, which
    two-digit years cannot tell from a child: an age under 18 is declared missing."""
    age = (_short_time(admitted).year % 100 - _short_time(born).year % 100) % 100
    if age < 18:
        return None
    for bound, label in ((45, "18-44"), (65, "45-64"), (80, "65-79")):
        if age < bound:
            return label
    return "80+"


def _hours_between(start: str, stop: str) -> float:
    delta = _short_time(stop) - _short_time(start)
    if delta < timedelta(0):  # a stay across the two-digit century turn (…/68 → …/69)
        delta += timedelta(days=36525)
    return delta.total_seconds() / 3600.0


def build_mimic(root: Path) -> pd.DataFrame:
    """One row per admission of the MIMIC-III demo (ADMISSIONS joined to PATIENTS, ICUSTAYS,
    DIAGNOSES_ICD, PROCEDURES_ICD and PRESCRIPTIONS by HADM_ID), in HADM_ID order."""
    folder = root / "mimic3_demo"
    admissions = pd.read_csv(folder / "ADMISSIONS.csv", dtype=str, keep_default_na=False)
    patients = pd.read_csv(folder / "PATIENTS.csv", dtype=str, keep_default_na=False)
    icu = pd.read_csv(folder / "ICUSTAYS.csv", dtype=str, keep_default_na=False)
    diagnoses = pd.read_csv(folder / "DIAGNOSES_ICD.csv", dtype=str, keep_default_na=False)
    procedures = pd.read_csv(folder / "PROCEDURES_ICD.csv", dtype=str, keep_default_na=False)
    prescriptions = pd.read_csv(
        folder / "PRESCRIPTIONS.csv.gz", dtype=str, keep_default_na=False, usecols=["HADM_ID"]
    )
    admissions = admissions.sort_values("HADM_ID", key=lambda s: s.astype(int))
    born = dict(zip(patients["SUBJECT_ID"], patients["DOB"], strict=True))
    gender = dict(zip(patients["SUBJECT_ID"], patients["GENDER"], strict=True))
    icu["LOS"] = pd.to_numeric(icu["LOS"].replace("", None))
    icu_count = icu.groupby("HADM_ID").size()
    icu_days = icu.groupby("HADM_ID")["LOS"].sum(min_count=1)
    icu_first = icu.sort_values("INTIME").groupby("HADM_ID")["FIRST_CAREUNIT"].first()
    n_diagnoses = diagnoses.groupby("HADM_ID").size()
    n_procedures = procedures.groupby("HADM_ID").size()
    n_prescriptions = prescriptions.groupby("HADM_ID").size()
    rows = []
    for _, a in admissions.iterrows():
        hadm = a["HADM_ID"]
        stays = int(icu_count.get(hadm, 0))
        rows.append(
            {
                "gender": gender[a["SUBJECT_ID"]],
                "age_group": _age_group(a["ADMITTIME"], born[a["SUBJECT_ID"]]),
                "ethnicity": _ethnicity(a["ETHNICITY"]),
                "insurance": a["INSURANCE"] or None,
                "marital_status": _known(a["MARITAL_STATUS"]),
                "admission_type": a["ADMISSION_TYPE"] or None,
                "admission_location": a["ADMISSION_LOCATION"] or None,
                "hospital_days": round(_hours_between(a["ADMITTIME"], a["DISCHTIME"]) / 24, 2),
                "icu_stays": float(stays),
                "icu_days": float(icu_days[hadm]) if stays and pd.notna(icu_days[hadm]) else None,
                "first_careunit": icu_first.get(hadm) if stays else None,
                "n_diagnoses": float(n_diagnoses.get(hadm, 0)),
                "n_procedures": float(n_procedures.get(hadm, 0)),
                "n_prescriptions": float(n_prescriptions.get(hadm, 0)),
                "died_in_hospital": "true" if a["HOSPITAL_EXPIRE_FLAG"] == "1" else "false",
            }
        )
    return _strings(pd.DataFrame(rows))


# -- openpsych_rwas (9,881 rows) -----------------------------------------------------------------

_RWAS_ANSWERS = tuple(f"Q{i}" for i in range(1, 23))
_RWAS_CODED = (
    "education",
    "urban",
    "gender",
    "engnat",
    "hand",
    "religion",
    "orientation",
    "race",
    "voted",
    "married",
)


def build_rwas(root: Path) -> pd.DataFrame:
    """The RWAS answers Q1–Q22 (1–9) and the respondents' background; 0 is the codebook's
    "not answered" in the answers and the coded background questions, and in familysize."""
    raw = pd.read_csv(
        root / "openpsych_rwas" / "rwas.csv.gz",
        usecols=[*_RWAS_ANSWERS, *_RWAS_CODED, "age", "familysize"],
    )
    for column in (*_RWAS_ANSWERS, *_RWAS_CODED, "familysize"):
        raw[column] = raw[column].where(raw[column] != 0)
    frame = raw[[*_RWAS_ANSWERS, *_RWAS_CODED, "age", "familysize"]].astype(float)
    return _strings(frame)


# -- kaggle_titanic (891 passengers; held out) -----------------------------------------------------


def build_titanic(root: Path) -> pd.DataFrame:
    """Kaggle's Titanic training file; ``deck`` is the cabin's first letter (missing when the
    cabin is empty), and an empty age or port is missing."""
    raw = pd.read_csv(root / "kaggle_titanic" / "train.csv", dtype=str, na_filter=False)
    frame = raw[["Sex", "Age", "SibSp", "Parch", "Pclass", "Fare", "Embarked", "Survived"]].copy()
    frame = frame.where(frame != "")
    frame["deck"] = [cabin[0] if cabin else None for cabin in raw["Cabin"]]
    return _strings(frame)


# -- uci_breast_cancer_wdbc (569 patients; held out) ---------------------------------------------

_WDBC_MEASURES = (
    "radius",
    "texture",
    "perimeter",
    "area",
    "smoothness",
    "compactness",
    "concavity",
    "concave_points",
    "symmetry",
    "fractal_dimension",
)


def build_wdbc(root: Path) -> pd.DataFrame:
    """Breast Cancer Wisconsin (Diagnostic): the mean and the standard error of the ten nucleus
    measures of each sample, and the diagnosis as ``malignant`` (1 for M, 0 for B); no cell is
    missing."""
    raw = pd.read_csv(root / "uci_breast_cancer_wdbc" / "wdbc.csv", dtype=str, na_filter=False)
    columns = [f"{m}_mean" for m in _WDBC_MEASURES] + [f"{m}_se" for m in _WDBC_MEASURES]
    frame = raw[columns].copy()
    frame["malignant"] = (raw["diagnosis"] == "M").astype(int).astype(str)
    return _strings(frame)


# -- uci_adult (32,561 people; held out) ---------------------------------------------------------

_ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
)


def build_adult(root: Path) -> pd.DataFrame:
    """UCI Adult's training file; ``?`` is missing. The sampling weight ``fnlwgt`` and
    ``education-num`` (a code of ``education``) are left out."""
    raw = pd.read_csv(
        root / "uci_adult" / "adult_train.csv.gz", dtype=str, na_filter=False, skipinitialspace=True
    )
    if tuple(raw.columns) != _ADULT_COLUMNS:
        raise RuntimeError(f"uci_adult: unexpected columns {list(raw.columns)}")
    frame = raw.drop(columns=["fnlwgt", "education-num"])
    frame = frame.where(frame != "?")
    return _strings(frame)


# -- the declared splits -------------------------------------------------------------------------

WEAK_TABLES: dict[str, TableSpec] = {
    "stroke": TableSpec(
        key="stroke",
        title="Kaggle stroke (5,110 patients)",
        build=build_stroke,
        left=(
            "gender",
            "age",
            "ever_married",
            "work_type",
            "Residence_type",
            "smoking_status",
        ),
        right=("hypertension", "heart_disease", "avg_glucose_level", "bmi", "stroke"),
        rationale="left = demographics and lifestyle; right = cardiovascular conditions, "
        "measurements (glucose, BMI) and the stroke outcome",
    ),
    "heart": TableSpec(
        key="heart",
        title="UCI heart disease, 4 sites (920 patients)",
        build=build_heart,
        left=("site", "age", "sex", "cp", "exang"),
        right=(
            "trestbps",
            "chol",
            "fbs",
            "restecg",
            "thalach",
            "oldpeak",
            "slope",
            "ca",
            "thal",
            "diagnosed",
        ),
        rationale="left = who the patient is and what they report (site, age, sex, chest-pain "
        "type, exercise-induced angina); right = test measurements (blood pressure, "
        "cholesterol, ECG, exercise test, fluoroscopy, thallium) and the angiographic diagnosis",
    ),
    "pima": TableSpec(
        key="pima",
        title="Pima diabetes (768 women)",
        build=build_pima,
        left=("Pregnancies", "Age", "DiabetesPedigreeFunction"),
        right=("Glucose", "BloodPressure", "SkinThickness", "Insulin", "BMI", "Outcome"),
        rationale="left = history (pregnancies, age, family-history pedigree score); right = "
        "clinical measurements and the diabetes outcome",
    ),
    "mimic": TableSpec(
        key="mimic",
        title="MIMIC-III demo, one row per admission (129 admissions)",
        build=build_mimic,
        left=(
            "gender",
            "age_group",
            "ethnicity",
            "insurance",
            "marital_status",
            "admission_type",
            "admission_location",
        ),
        right=(
            "hospital_days",
            "icu_stays",
            "icu_days",
            "first_careunit",
            "n_diagnoses",
            "n_procedures",
            "n_prescriptions",
            "died_in_hospital",
        ),
        rationale="left = demographics and how the patient was admitted; right = the hospital "
        "course (length of stay, ICU stays, diagnoses, procedures, prescriptions) and death in "
        "hospital",
    ),
    "rwas": TableSpec(
        key="rwas",
        title="OpenPsychometrics RWAS (9,881 respondents)",
        build=build_rwas,
        left=_RWAS_ANSWERS,
        right=(*_RWAS_CODED, "age", "familysize"),
        rationale="left = the 22 authoritarianism-scale answers; right = the respondents' "
        "background (education, upbringing area, gender, language, religion, orientation, race, "
        "voting, marital status, age, family size), as README §4 suggests",
    ),
}


#: Tables the defaults were never judged on (declared 2026-11-27 before any run; not health data).
HELD_OUT_TABLES: dict[str, TableSpec] = {
    "titanic": TableSpec(
        key="titanic",
        title="Kaggle Titanic, training file (891 passengers)",
        build=build_titanic,
        left=("Sex", "Age", "SibSp", "Parch", "Pclass"),
        right=("Fare", "Embarked", "deck", "Survived"),
        rationale="left = who the passenger is (sex, age, relatives aboard, class of travel); "
        "right = the ticket (fare, port of embarkation, deck) and survival",
    ),
    "wdbc": TableSpec(
        key="wdbc",
        title="UCI Breast Cancer Wisconsin, diagnostic (569 samples)",
        build=build_wdbc,
        left=tuple(f"{m}_mean" for m in _WDBC_MEASURES),
        right=(*(f"{m}_se" for m in _WDBC_MEASURES), "malignant"),
        rationale="left = the typical cell nucleus of the sample (the means of ten measures); "
        "right = how much the nuclei vary (the standard errors of the same measures) and the "
        "diagnosis (declared 2026-11-28 before any run on this table)",
    ),
    "adult": TableSpec(
        key="adult",
        title="UCI Adult, training file (32,561 people)",
        build=build_adult,
        left=(
            "age",
            "sex",
            "race",
            "native-country",
            "marital-status",
            "relationship",
            "education",
        ),
        right=(
            "workclass",
            "occupation",
            "hours-per-week",
            "capital-gain",
            "capital-loss",
            "income",
        ),
        rationale="left = who the person is (age, sex, race, country of birth, family, "
        "education); right = their work (class of worker, occupation, hours), capital income "
        "and the income class",
    ),
}


def write_pair(spec: TableSpec, root: Path, directory: Path) -> int:
    """Build ``spec``'s table and write ``left.csv`` / ``right.csv`` (``id`` + each view's
    columns) into ``directory``; returns the row count."""
    frame = spec.build(root)
    missing = [c for c in (*spec.left, *spec.right) if c not in frame.columns]
    if missing:
        raise RuntimeError(f"{spec.key}: the built table lacks {missing}")
    directory.mkdir(parents=True, exist_ok=True)
    frame[["id", *spec.left]].to_csv(directory / "left.csv", index=False)
    frame[["id", *spec.right]].to_csv(directory / "right.csv", index=False)
    return len(frame)
