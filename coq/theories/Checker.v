(** The plan checker: runs the typing rules along a plan and reports the
    types passed through, the peak local size and the elements each step
    makes a device receive. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules.
Import ListNotations.

(** A plan is a sequence of collectives. *)
Definition plan := list coll.

(** Well-typed chains of steps, with the types and received counts along them. *)
Inductive chain (m : mesh) : atype -> plan -> atype -> Prop :=
| chain_nil : forall t, chain m t [] t
| chain_cons : forall t c t1 p t', step m t c t1 -> chain m t1 p t' -> chain m t (c :: p) t'.

(** Some device's block changes between [t] and [t'], decided without
    enumerating devices: a dimension's block is the same on every device
    exactly when its axes, with the size-1 axes left out, are the same list
    ([moves_spec]; [moves_enum_iff] relates it to the enumeration of ranks). *)
Definition strip1 (m : mesh) (A : list nat) : list nat := filter (fun a => negb (asize m a =? 1)) A.

Fixpoint moves_dims (m : mesh) (t t' : atype) : bool :=
  match t, t' with
  | [], [] => false
  | D :: u, D' :: u' => negb (nat_list_eqb (strip1 m (axes D)) (strip1 m (axes D'))) || moves_dims m u u'
  | _, _ => true
  end.

Definition moves (m : mesh) (t t' : atype) : bool := moves_dims m t t'.

(** The enumerating definition: some rank whose blocks differ. *)
Definition moves_enum (m : mesh) (t t' : atype) : bool :=
  existsb (fun r => negb (nat_list_eqb (blocks m t (coords_of_rank m r)) (blocks m t' (coords_of_rank m r))))
          (seq 0 (ndevices m)).

(** Elements received per device by one step (the spec's table; for a
    permute, the most any device receives). *)
Definition recv (m : mesh) (t : atype) (c : coll) (t' : atype) : nat :=
  match c with
  | AllGather _ xs => (nprod m xs - 1) * size m t
  | DynSlice _ _ => 0
  | AllToAll _ _ xs => size m t - size m t / nprod m xs
  | AllPermute _ => if moves m t t' then size m t else 0
  end.

Inductive trace (m : mesh) : atype -> plan -> list atype -> list nat -> Prop :=
| trace_nil : forall t, trace m t [] [t] []
| trace_cons : forall t c t1 p ts rs,
    step m t c t1 -> trace m t1 p ts rs -> trace m t (c :: p) (t :: ts) (recv m t c t1 :: rs).

(** Peak memory: the largest local size along the way. *)
Definition peak_of (m : mesh) (ts : list atype) : nat :=
  fold_right (fun t acc => Nat.max (size m t) acc) 0 ts.

Definition dim_eq_dec : forall x y : dim, {x = y} + {x <> y}.
Proof. decide equality; [apply Nat.eq_dec | apply list_eq_dec, Nat.eq_dec]. Defined.

Definition atype_eqb (t t' : atype) : bool := if list_eq_dec dim_eq_dec t t' then true else false.

Lemma atype_eqb_spec : forall t t', atype_eqb t t' = true <-> t = t'.
Proof. intros. unfold atype_eqb. destruct (list_eq_dec dim_eq_dec t t'); split; congruence. Qed.

(** Run the rules from step number [i]; the first failure is reported with its number. *)
Fixpoint run (m : mesh) (t : atype) (p : plan) (i : nat) : result (nat * error) (list atype * list nat) :=
  match p with
  | [] => Ok ([t], [])
  | c :: p' =>
      match apply m t c with
      | Err e => Err (i, e)
      | Ok t1 =>
          match run m t1 p' (S i) with
          | Err x => Err x
          | Ok (ts, rs) => Ok (t :: ts, recv m t c t1 :: rs)
          end
      end
  end.

Record report := mkreport { types : list atype; peak : nat; received : list nat }.

(** Steps are numbered from 1; number 0 blames the mesh, source or target. *)
(** The problem's own errors, reported as step 0. *)
(** The problem's own checks, for any kind of type [A] with a
    well-formedness test [okb] and global sizes [gs] (array types here,
    uneven types in [Uchecker], partial types in [Pchecker]). *)
Definition problem_error_with {A} (okb : mesh -> A -> bool) (gs : A -> list nat) (m : mesh) (src dst : A)
    : option error :=
  if negb (wf_meshb m) then Some BadMesh else
  if negb (okb m src) then Some BadSource else
  if negb (okb m dst) then Some BadDest else
  if negb (nat_list_eqb (gs src) (gs dst)) then Some GlobalShapeMismatch else None.

Lemma problem_error_with_none : forall {A} (ok : mesh -> A -> Prop) okb gs m src dst,
  (forall t, okb m t = true <-> ok m t) -> (forall t, ok m t -> wf_mesh m) ->
  ok m src -> ok m dst -> gs src = gs dst -> problem_error_with okb gs m src dst = None.
Proof.
  intros A ok okb gs m src dst Hb Hm Hs Hd Hg. unfold problem_error_with.
  rewrite (proj2 (wf_meshb_spec m) (Hm src Hs)), (proj2 (Hb src) Hs), (proj2 (Hb dst) Hd).
  rewrite (proj2 (nat_list_eqb_spec _ _) Hg). reflexivity.
Qed.

Lemma problem_error_with_ok : forall {A} (ok : mesh -> A -> Prop) okb gs m src dst,
  (forall t, okb m t = true <-> ok m t) ->
  problem_error_with okb gs m src dst = None -> ok m src /\ ok m dst /\ gs src = gs dst.
Proof.
  intros A ok okb gs m src dst Hb H. unfold problem_error_with in H.
  destruct (wf_meshb m); [|discriminate]. destruct (okb m src) eqn:Hs; [|discriminate].
  destruct (okb m dst) eqn:Hd; [|discriminate].
  destruct (nat_list_eqb (gs src) (gs dst)) eqn:Hg; [|discriminate].
  apply Hb in Hs, Hd. apply nat_list_eqb_spec in Hg. auto.
Qed.

Definition problem_error (m : mesh) (src dst : atype) : option error :=
  problem_error_with wfb (map gsize) m src dst.

Definition check (m : mesh) (src dst : atype) (p : plan) : result (nat * error) report :=
  match problem_error m src dst with Some e => Err (0, e) | None =>
  match run m src p 1 with
  | Err x => Err x
  | Ok (ts, rs) =>
      if atype_eqb (last ts src) dst
      then Ok (mkreport ts (peak_of m ts) rs)
      else Err (length p, WrongResult)
  end end.

(** The problem a plan solves. *)
Definition valid_problem (m : mesh) (src dst : atype) : Prop :=
  wf m src /\ wf m dst /\ map gsize src = map gsize dst.

Lemma trace_nonempty : forall m t p ts rs, trace m t p ts rs -> ts <> [].
Proof. intros m t p ts rs H. destruct H; discriminate. Qed.

Lemma trace_chain : forall m t p ts rs, trace m t p ts rs -> chain m t p (last ts t).
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH].
  - constructor.
  - pose proof (trace_nonempty _ _ _ _ _ Ht) as Hne.
    rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts t t1) by exact Hne.
    econstructor; eauto.
Qed.

Lemma chain_trace : forall m t p t', chain m t p t' ->
  exists ts rs, trace m t p ts rs /\ last ts t = t'.
Proof.
  intros m t p t' H. induction H as [t|t c t1 p t' Hs Hc IH].
  - exists [t], []. split; [constructor|reflexivity].
  - destruct IH as [ts [rs [Ht Hl]]].
    exists (t :: ts), (recv m t c t1 :: rs). split; [constructor; auto|].
    pose proof (trace_nonempty _ _ _ _ _ Ht) as Hne.
    rewrite last_cons_ne by exact Hne. rewrite (last_indep _ ts t t1) by exact Hne. exact Hl.
Qed.

(** Facts about chains, traces and peaks. *)
Lemma chain_app : forall m t p1 t1 p2 t2,
  chain m t p1 t1 -> chain m t1 p2 t2 -> chain m t (p1 ++ p2) t2.
Proof.
  intros m t p1 t1 p2 t2 H. induction H; simpl; intros; auto. econstructor; eauto.
Qed.

Lemma trace_hd : forall m t p ts rs, trace m t p ts rs -> exists ts', ts = t :: ts'.
Proof. intros m t p ts rs H. destruct H; eauto. Qed.

Lemma trace_length : forall m t p ts rs, trace m t p ts rs ->
  length ts = S (length p) /\ length rs = length p.
Proof. intros m t p ts rs H. induction H; simpl; lia. Qed.

Lemma trace_wf_all : forall m t p ts rs, trace m t p ts rs -> wf m t -> Forall (wf m) ts.
Proof.
  intros m t p ts rs H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros Hw; constructor; auto.
  apply IH. eapply step_wf; eauto.
Qed.

Lemma trace_split : forall m p1 p2 t ts rs, trace m t (p1 ++ p2) ts rs ->
  trace m (nth (length p1) ts t) p2 (skipn (length p1) ts) (skipn (length p1) rs) /\
  chain m t p1 (nth (length p1) ts t).
Proof.
  intros m p1. induction p1 as [|c p1 IH]; simpl; intros p2 t ts rs H.
  - destruct (trace_hd _ _ _ _ _ H) as [ts' ->]. simpl. split; auto. constructor.
  - inversion H as [|? ? t1 ? ts0 rs0 Hs Ht]; subst. destruct (IH p2 t1 ts0 rs0 Ht) as [H1 H2].
    destruct (trace_length _ _ _ _ _ Ht) as [Hl _]. rewrite app_length in Hl.
    change (nth (S (length p1)) (t :: ts0) t) with (nth (length p1) ts0 t).
    replace (nth (length p1) ts0 t) with (nth (length p1) ts0 t1) by (apply nth_indep; lia). split; auto. econstructor; eauto.
Qed.

Lemma trace_last_cons : forall m t c t1 p ts rs, step m t c t1 -> trace m t1 p ts rs ->
  last (t :: ts) t = last ts t1.
Proof.
  intros m t c t1 p ts rs Hs Ht. destruct (trace_hd _ _ _ _ _ Ht) as [ts' ->].
  rewrite last_cons_ne by discriminate. apply last_indep. discriminate.
Qed.

Lemma peak_of_ge : forall m ts t, In t ts -> size m t <= peak_of m ts.
Proof.
  induction ts as [|x ts IH]; simpl; intros t H; [contradiction|].
  destruct H as [->|H]; [lia|]. specialize (IH t H). lia.
Qed.

Lemma peak_of_le : forall m ts k, (forall t, In t ts -> size m t <= k) -> peak_of m ts <= k.
Proof.
  induction ts as [|t ts IH]; simpl; intros k H; [lia|].
  assert (size m t <= k) by auto. assert (peak_of m ts <= k) by auto. lia.
Qed.

(** [run] computes the trace of a plan from a well-formed type. *)
Lemma run_trace : forall m p t i ts rs, wf m t -> run m t p i = Ok (ts, rs) -> trace m t p ts rs.
Proof.
  intros m p. induction p as [|c p IH]; intros t i ts rs Hwf H; cbn [run] in H.
  - inversion H; subst. constructor.
  - destruct (apply m t c) as [t1|e] eqn:Ha; [|discriminate].
    destruct (run m t1 p (S i)) as [[ts' rs']|x] eqn:Hr; [|discriminate].
    inversion H; subst. apply apply_sound in Ha; auto.
    constructor; auto. apply (IH t1 (S i)); auto. eapply step_wf; eauto.
Qed.

Lemma trace_run : forall m t p ts rs, wf m t -> trace m t p ts rs -> forall i, run m t p i = Ok (ts, rs).
Proof.
  intros m t p ts rs Hwf H. induction H as [t|t c t1 p ts rs Hs Ht IH]; intros i.
  - reflexivity.
  - cbn [run]. rewrite (apply_complete m t c t1 Hwf Hs).
    rewrite IH by (eapply step_wf; eauto). reflexivity.
Qed.

Lemma run_error : forall m p t k i e, wf m t -> run m t p k = Err (i, e) ->
  k <= i /\ exists t', chain m t (firstn (i - k) p) t' /\
                       exists c, nth_error p (i - k) = Some c /\ apply m t' c = Err e.
Proof.
  intros m p. induction p as [|c p IH]; intros t k i e Hwf H; cbn [run] in H.
  - discriminate.
  - destruct (apply m t c) as [t1|e0] eqn:Ha.
    + destruct (run m t1 p (S k)) as [[ts rs]|x] eqn:Hr; [discriminate|].
      inversion H; subst x.
      assert (Hs : step m t c t1) by (apply apply_sound; auto).
      apply IH in Hr as [Hle [t' [Hc [c' [Hn Ha']]]]]; [|eapply step_wf; eauto].
      split; [lia|]. replace (i - k) with (S (i - S k)) by lia.
      exists t'. split.
      * cbn [firstn]. econstructor; eauto.
      * exists c'. split; auto.
    + inversion H; subst. split; auto. rewrite Nat.sub_diag.
      exists t. split; [constructor|]. exists c. split; auto.
Qed.

(** Success means exactly: a valid problem, a well-typed chain from [src] to
    [dst], and a report whose types, peak and traffic are those of the chain. *)
Theorem check_ok_iff : forall m src dst p r,
  check m src dst p = Ok r <->
  valid_problem m src dst /\ trace m src p (types r) (received r) /\
  last (types r) src = dst /\ peak r = peak_of m (types r).
Proof.
  intros m src dst p r. split.
  - unfold check, problem_error, problem_error_with. intros H.
    destruct (wf_meshb m) eqn:Hm; cbn [negb] in H; [|discriminate].
    destruct (wfb m src) eqn:Hs; cbn [negb] in H; [|discriminate].
    destruct (wfb m dst) eqn:Hd; cbn [negb] in H; [|discriminate].
    destruct (nat_list_eqb (map gsize src) (map gsize dst)) eqn:Hg; cbn [negb] in H; [|discriminate].
    destruct (run m src p 1) as [[ts rs]|x] eqn:Hr; [|discriminate].
    destruct (atype_eqb (last ts src) dst) eqn:He; [|discriminate].
    inversion H; subst r. cbn [types received peak].
    apply wfb_spec in Hs, Hd. apply nat_list_eqb_spec in Hg. apply atype_eqb_spec in He.
    split; [split; [|split]; auto|split; [|split]; auto]. apply (run_trace m p src 1); auto.
  - intros [[Hs [Hd Hg]] [Ht [Hl Hp]]]. unfold check, problem_error, problem_error_with.
    assert (Hm : wf_meshb m = true) by (apply wf_meshb_spec; apply Hs).
    assert (Hs' : wfb m src = true) by (apply wfb_spec; auto).
    assert (Hd' : wfb m dst = true) by (apply wfb_spec; auto).
    assert (Hg' : nat_list_eqb (map gsize src) (map gsize dst) = true) by (apply nat_list_eqb_spec; auto).
    assert (He : atype_eqb (last (types r) src) dst = true) by (apply atype_eqb_spec; auto).
    rewrite Hm, Hs', Hd', Hg'. cbn [negb].
    rewrite (trace_run m src p (types r) (received r) Hs Ht 1).
    rewrite He. destruct r as [ts pk rs]. cbn [types peak received] in *. subst pk. reflexivity.
Qed.

Corollary check_accepts_iff_chain : forall m src dst p,
  (exists r, check m src dst p = Ok r) <-> valid_problem m src dst /\ chain m src p dst.
Proof.
  intros m src dst p. split.
  - intros [r Hr]. apply check_ok_iff in Hr as [Hv [Ht [Hl _]]].
    split; auto. rewrite <- Hl. eapply trace_chain; eauto.
  - intros [Hv Hc]. destruct (chain_trace m src p dst Hc) as [ts [rs [Ht Hl]]].
    exists (mkreport ts (peak_of m ts) rs). apply check_ok_iff. cbn [types received peak].
    auto.
Qed.

(** An error at step [i >= 1] names the first step that is ill-typed: the
    steps before it form a chain, and step [i] is rejected for reason [e]. *)
Theorem check_error_first : forall m src dst p i e,
  check m src dst p = Err (i, e) -> 1 <= i <= length p -> e <> WrongResult ->
  exists t, chain m src (firstn (i - 1) p) t /\
            exists c, nth_error p (i - 1) = Some c /\ apply m t c = Err e.
Proof.
  intros m src dst p i e H Hi Hne. unfold check, problem_error, problem_error_with in H.
  destruct (wf_meshb m) eqn:Hm; cbn [negb] in H; [|inversion H; lia].
  destruct (wfb m src) eqn:Hs; cbn [negb] in H; [|inversion H; lia].
  destruct (wfb m dst) eqn:Hd; cbn [negb] in H; [|inversion H; lia].
  destruct (nat_list_eqb (map gsize src) (map gsize dst)) eqn:Hg; cbn [negb] in H; [|inversion H; lia].
  destruct (run m src p 1) as [[ts rs]|x] eqn:Hr.
  - destruct (atype_eqb (last ts src) dst); inversion H; subst; congruence.
  - inversion H; subst x. apply wfb_spec in Hs.
    apply run_error in Hr as [_ Hr]; auto.
Qed.

(** * [moves] decides whether some device's block changes *)

Lemma mr_zero : forall m A c, (forall a, In a A -> c a = 0) -> mr m A c = 0.
Proof.
  intros m A c. induction A as [|a A IH] using rev_ind; intros H; [reflexivity|].
  rewrite mr_app, mr_single, IH by (intros; apply H, in_or_app; auto).
  rewrite H by (apply in_or_app; simpl; auto). lia.
Qed.

Lemma mr_strip1 : forall m A c, valid m c -> (forall a, In a A -> a < length m) ->
  mr m A c = mr m (strip1 m A) c.
Proof.
  intros m A c Hc. induction A as [|a A IH] using rev_ind; intros HA; [reflexivity|].
  unfold strip1. rewrite filter_app. fold (strip1 m A). simpl.
  rewrite mr_app, mr_single, IH by (intros; apply HA, in_or_app; auto).
  assert (Ha : a < length m) by (apply HA, in_or_app; simpl; auto).
  destruct (Nat.eqb_spec (asize m a) 1) as [E|E]; simpl.
  - rewrite nprod_single, E. specialize (Hc a Ha). rewrite E in Hc. rewrite app_nil_r. lia.
  - rewrite mr_app, mr_single, nprod_single. reflexivity.
Qed.

(** The device with coordinate 1 on axis [b] and 0 elsewhere. *)
Definition unit_dev (b : nat) : coords := fun x => if x =? b then 1 else 0.

Lemma unit_dev_eq : forall b, unit_dev b b = 1.
Proof. intros. unfold unit_dev. now rewrite Nat.eqb_refl. Qed.

Lemma unit_dev_neq : forall b x, x <> b -> unit_dev b x = 0.
Proof. intros. unfold unit_dev. destruct (Nat.eqb_spec x b); congruence. Qed.

Lemma unit_dev_valid : forall m b, wf_mesh m -> 1 < asize m b -> valid m (unit_dev b).
Proof.
  intros m b Hm Hb a Ha. unfold unit_dev. destruct (Nat.eqb_spec a b); subst; [lia|].
  specialize (Hm a Ha). lia.
Qed.

Lemma nprod_ge1 : forall m A, (forall a, In a A -> 0 < asize m a) -> 1 <= nprod m A.
Proof.
  intros m A H. rewrite nprod_prod. apply prod_pos. intros x Hx. apply in_map_iff in Hx.
  destruct Hx as [a [<- Ha]]. auto.
Qed.

(** Two lists of distinct axes of sizes at least 2 give the same block on
    every device only if they are equal: otherwise a device tells them apart. *)
Lemma mr_distinguish : forall m B B', wf_mesh m -> NoDup B -> NoDup B' ->
  (forall a, In a B -> 1 < asize m a) -> (forall a, In a B' -> 1 < asize m a) ->
  B <> B' -> exists c, valid m c /\ mr m B c <> mr m B' c.
Proof.
  intros m B. induction B as [|b P IH] using rev_ind; intros B' Hm HnB HnB' HB HB' Hne.
  - destruct B' as [|b' P'] using rev_ind; [congruence|]. clear IHP'.
    exists (unit_dev b'). split; [apply unit_dev_valid; auto; apply HB', in_or_app; simpl; auto|].
    rewrite mr_app, mr_single. rewrite unit_dev_eq, mr_nil. lia.
  - assert (Hb : 1 < asize m b) by (apply HB, in_or_app; simpl; auto).
    apply NoDup_remove in HnB. rewrite app_nil_r in HnB. destruct HnB as [HnP HbP].
    destruct B' as [|b' P'] using rev_ind.
    + exists (unit_dev b). split; [apply unit_dev_valid; auto|].
      rewrite mr_app, mr_single. rewrite unit_dev_eq, mr_nil. lia.
    + clear IHP'.
      assert (Hb' : 1 < asize m b') by (apply HB', in_or_app; simpl; auto).
      apply NoDup_remove in HnB'. rewrite app_nil_r in HnB'. destruct HnB' as [HnP' HbP'].
      destruct (Nat.eq_dec b b') as [<-|Hbb].
      * assert (HP : P <> P') by (intro; subst; congruence).
        destruct (IH P' Hm HnP HnP' (fun a Ha => HB a (in_or_app _ _ _ (or_introl Ha)))
                     (fun a Ha => HB' a (in_or_app _ _ _ (or_introl Ha))) HP) as [c [Hc Hd]].
        exists c. split; auto. rewrite !mr_app, !mr_single, !nprod_single. intro E.
        apply Hd. apply (Nat.mul_cancel_r _ _ (asize m b)); [lia|]. lia.
      * exists (unit_dev b). split; [apply unit_dev_valid; auto|].
        rewrite !mr_app, !mr_single, !nprod_single.
        rewrite (mr_zero m P) by (intros a Ha; apply unit_dev_neq; intro; subst; tauto).
        rewrite unit_dev_eq, (unit_dev_neq b b') by congruence.
        intro E. assert (Hmod := f_equal (fun x => x mod asize m b') E). simpl in Hmod.
        rewrite Nat.add_0_r, Nat.mod_mul in Hmod by lia.
        rewrite Nat.mod_small in Hmod by lia. lia.
Qed.

Lemma strip1_props : forall m A, wf_mesh m -> NoDup A -> (forall a, In a A -> a < length m) ->
  NoDup (strip1 m A) /\ forall a, In a (strip1 m A) -> 1 < asize m a.
Proof.
  intros m A Hm Hn HA. split.
  - apply NoDup_filter; auto.
  - intros a Ha. unfold strip1 in Ha. apply filter_In in Ha as [Ha Hs].
    apply negb_true_iff, Nat.eqb_neq in Hs. specialize (Hm a (HA a Ha)). lia.
Qed.

Lemma wf_dims : forall m t, wf m t -> forall D, In D t -> NoDup (axes D) /\ (forall a, In a (axes D) -> a < length m).
Proof.
  intros m t [_ [HF Hn]] D HD. rewrite Forall_forall in HF. destruct (HF D HD) as [_ [Ha _]].
  split; auto. unfold used in Hn. apply in_split in HD as [L [R ->]].
  rewrite flat_map_app in Hn. simpl in Hn. apply nodup_app_r in Hn. eapply nodup_app_l; eauto.
Qed.

Lemma zero_valid : forall m, wf_mesh m -> valid m (fun _ => 0).
Proof. intros m Hm a Ha. apply Hm; auto. Qed.

(** Spec of [moves] on well-formed types: some device's block changes. *)
Theorem moves_spec : forall m t t', wf m t -> wf m t' ->
  (moves m t t' = true <-> exists c, valid m c /\ blocks m t c <> blocks m t' c).
Proof.
  intros m t t' Hw Hw'. assert (Hm : wf_mesh m) by apply Hw.
  assert (Ht := wf_dims m t Hw). assert (Ht' := wf_dims m t' Hw'). clear Hw Hw'.
  unfold moves, blocks. revert t' Ht Ht'. induction t as [|D u IH]; intros [|D' u'] Ht Ht'; simpl.
  - split; [discriminate|]. intros [c [_ H]]. congruence.
  - split; auto. intros _. exists (fun _ => 0). split; [apply zero_valid; auto|discriminate].
  - split; auto. intros _. exists (fun _ => 0). split; [apply zero_valid; auto|discriminate].
  - assert (HD := Ht D (or_introl eq_refl)). assert (HD' := Ht' D' (or_introl eq_refl)).
    specialize (IH u' (fun X HX => Ht X (or_intror HX)) (fun X HX => Ht' X (or_intror HX))).
    rewrite orb_true_iff, negb_true_iff, IH. split.
    + intros [E|[c [Hc Hd]]].
      * destruct (nat_list_eqb_spec (strip1 m (axes D)) (strip1 m (axes D'))) as [_ Hr].
        assert (Hne : strip1 m (axes D) <> strip1 m (axes D')) by (intro X; apply Hr in X; congruence).
        destruct (strip1_props m (axes D) Hm (proj1 HD) (proj2 HD)) as [N1 S1].
        destruct (strip1_props m (axes D') Hm (proj1 HD') (proj2 HD')) as [N2 S2].
        destruct (mr_distinguish m _ _ Hm N1 N2 S1 S2 Hne) as [c [Hc Hd]].
        exists c. split; auto. unfold block. rewrite (mr_strip1 m (axes D)), (mr_strip1 m (axes D')) by (tauto || auto).
        congruence.
      * exists c. split; auto. congruence.
    + intros [c [Hc Hd]]. destruct (nat_list_eqb (strip1 m (axes D)) (strip1 m (axes D'))) eqn:E; [|auto].
      right. exists c. split; auto. intro X. apply Hd. f_equal; auto.
      apply nat_list_eqb_spec in E. unfold block.
      rewrite (mr_strip1 m (axes D)), (mr_strip1 m (axes D')), E by (tauto || auto). reflexivity.
Qed.


Lemma blocks_ext : forall m t c c', wf m t -> (forall a, a < length m -> c a = c' a) ->
  blocks m t c = blocks m t c'.
Proof.
  intros m t c c' Hw H. unfold blocks. apply map_ext_in. intros D HD. unfold block.
  apply mr_ext. intros a Ha. apply H. apply (wf_dims m t Hw D HD); auto.
Qed.

Lemma moves_enum_spec : forall m t t', wf m t -> wf m t' ->
  (moves_enum m t t' = true <-> exists c, valid m c /\ blocks m t c <> blocks m t' c).
Proof.
  intros m t t' Hw Hw'. assert (Hm : wf_mesh m) by apply Hw. unfold moves_enum.
  rewrite existsb_exists. split.
  - intros [r [_ Hr]]. exists (coords_of_rank m r). split; [apply coords_of_rank_valid; auto|].
    intro E. rewrite E in Hr. replace (nat_list_eqb _ _) with true in Hr; [discriminate|].
    symmetry. apply nat_list_eqb_spec. auto.
  - intros [c [Hc Hd]]. exists (rank m c). split; [apply in_seq; pose proof (rank_lt m c Hc); lia|].
    rewrite (blocks_ext m t _ c), (blocks_ext m t' _ c) by (auto; intros; apply coords_of_rank_rank; auto).
    apply negb_true_iff. destruct (nat_list_eqb_spec (blocks m t c) (blocks m t' c)) as [H _].
    destruct (nat_list_eqb (blocks m t c) (blocks m t' c)); auto. exfalso. apply Hd, H; auto.
Qed.

(** On well-formed types the device-free [moves] agrees with the enumeration. *)
Corollary moves_enum_iff : forall m t t', wf m t -> wf m t' -> moves m t t' = moves_enum m t t'.
Proof.
  intros m t t' Hw Hw'. apply eq_true_iff_eq. rewrite moves_spec, moves_enum_spec by auto. tauto.
Qed.
